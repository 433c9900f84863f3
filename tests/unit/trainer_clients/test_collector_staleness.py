"""Staleness is judged for the whole group when it is handed out, against the live version."""

import asyncio

import httpx
import pytest
from tests.unit.trainer_clients.fake_servers import TEMPLATE, answer, collector_over, fates

from agentroll.testing.fake_rollout_server import FakeRolloutServer
from agentroll.trainer_clients import AsyncGroupCollector, FanOutError, GroupSpec


async def finished_not_taken(collector: AsyncGroupCollector) -> None:
    for _ in range(1000):
        if collector.pending == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the group never finished")


async def test_a_group_that_went_stale_in_the_queue_is_sampled_again_whole() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server], max_policy_lag=1, max_retries=1) as collector:
        assert collector.pool is not None
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 3)])
        await finished_not_taken(collector)  # whole and valid at version 0, not taken yet
        await collector.pool.resume(3)
        group = await collector.next_group(timeout_s=30)
    assert group is not None and group.valid
    assert [t.job_id for t in group.trajectories] == ["g-s0-r1", "g-s1-r1", "g-s2-r1"]
    assert [t.policy_versions for t in group.trajectories] == [[3], [3], [3]]
    assert group.dropped == {"stale": 3} and collector.stats.stale_dropped == 3


async def test_flagged_stale_groups_name_each_stale_member() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server], max_policy_lag=1, stale="flag") as collector:
        assert collector.pool is not None
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        await finished_not_taken(collector)
        await collector.pool.resume(2)
        group = await collector.next_group(timeout_s=30)
    assert group is not None and group.valid
    assert group.stale == ["g-s0-r0", "g-s1-r0"]


async def test_a_group_still_stale_after_its_resamplings_is_invalid_with_why() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server], max_policy_lag=0, max_retries=0) as collector:
        assert collector.pool is not None
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        await finished_not_taken(collector)
        await collector.pool.resume(1)
        group = await collector.next_group(timeout_s=30)
    assert group is not None and not group.valid
    assert group.reason == "stale after 0 resampling(s): g-s0-r0: default version 0 lags " \
        "the live 1 by > 0"  # fmt: skip


async def test_samples_ahead_of_the_live_version_are_not_passed_as_fresh() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server], max_policy_lag=1, stale="flag") as collector:
        collector.policy_version = 1
        server.policy_version = 4  # the servers moved on without this trainer knowing
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 1)])
        group = await collector.next_group(timeout_s=30)
    assert group is not None and group.stale == ["g-s0-r0"]


async def test_a_version_set_once_does_not_hide_later_resumes() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server]) as collector:
        assert collector.pool is not None
        collector.policy_version = 2
        await collector.pool.resume(5)
        assert collector.policy_version == 5
        collector.policy_version = 7  # the trainer may also move first
        assert collector.policy_version == 7


async def test_a_partial_resume_still_moves_the_version() -> None:
    moved, refusing = FakeRolloutServer(fates()), FakeRolloutServer(fates(), url="http://fake-1")

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        return answer(409) if request.url.path == "/v1/generation/resume" else None

    refusing.intercept = intercept
    async with collector_over([moved, refusing]) as collector:
        assert collector.pool is not None
        with pytest.raises(FanOutError):
            await collector.pool.resume(4)
        # one server now samples version 4: samples must be judged against it
        assert collector.pool.policy_version == 4 and collector.policy_version == 4
