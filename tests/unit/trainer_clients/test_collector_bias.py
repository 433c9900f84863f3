"""Selection bias, simulated through the real collector and pool on a virtual clock.

Agent tasks fail slowly: here every rollout succeeds with probability 0.3, successes take 1-3
(virtual) seconds and failures 2-8, and 10 % of tries are lost to infra_error. A collector
that keeps whichever samples finish first trains on a success rate above 0.3; one whose
groups are fixed by sample index must keep the true rate, with spares or without.
"""

import random
import statistics

import pytest

from agentroll.server.schema import JobRequest, Outcome
from agentroll.testing.fake_rollout_server import FakeRolloutServer, SimulatedRun
from agentroll.trainer_clients import AsyncGroupCollector, AsyncRolloutClient, GroupSpec

TRUE_RATE = 0.3
GROUPS, N = 300, 4
# the standard error of the mean of 1200 Bernoulli(0.3) rewards is 0.013: 3 of them
TOLERANCE = 0.04


def slow_failures(request: JobRequest) -> SimulatedRun:
    rng = random.Random(f"bias:{request.job_id}")  # one fate per try, whatever the order
    if rng.random() < 0.1:
        return SimulatedRun(Outcome.infra_error, None, rng.uniform(0.5, 8.0))
    if rng.random() < TRUE_RATE:
        return SimulatedRun(Outcome.ok, 1.0, rng.uniform(1.0, 3.0))
    return SimulatedRun(Outcome.agent_error, 0.0, rng.uniform(2.0, 8.0))


async def kept_mean(**options: object) -> tuple[float, AsyncGroupCollector]:
    server = FakeRolloutServer(slow_failures)
    client = AsyncRolloutClient(server.url, transport=server.transport)
    template = JobRequest(handler="sim", instance={})
    pool = {"poll_wait_s": 0.05, "health_interval_s": 60.0}
    async with AsyncGroupCollector(client, pool_options=pool, **options) as collector:  # type: ignore[arg-type]
        groups = await collector.collect(
            [GroupSpec(f"g{i}", template, N) for i in range(GROUPS)], timeout_s=120
        )
    await client.close()
    kept = [r for g in groups if g.valid for r in g.rewards]
    assert len(kept) >= 0.9 * GROUPS * N  # nearly every group completes
    return statistics.fmean(kept), collector


@pytest.mark.parametrize("oversample", [0, 2])
async def test_groups_fixed_by_index_keep_the_true_success_rate(oversample: int) -> None:
    mean, collector = await kept_mean(oversample=oversample, max_retries=2)
    assert abs(mean - TRUE_RATE) < TOLERANCE, mean
    unused = collector.stats.as_dict()
    # infra failures were retried or stood in for; nothing was chosen by speed
    assert unused["unused_infra_error"] > 0
    assert unused["unused_unfinished"] == 0


async def test_keeping_the_first_finishers_overstates_the_success_rate() -> None:
    mean, collector = await kept_mean(oversample=2, selection="first_finished")
    print(f"first_finished, oversample=2: kept mean {mean:.3f} (true {TRUE_RATE})")
    assert mean > TRUE_RATE + TOLERANCE  # the bias the by-index default avoids
    # and the collector says which tries it threw away: the slow ones
    by_quartile = collector.stats.unused_by_quartile()
    assert by_quartile["unfinished"] > 0
