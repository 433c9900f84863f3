"""GroupCollector against real servers: groups come back whole or explicitly invalid."""

import asyncio
from typing import Any

import httpx
import pytest
from tests.integration.trainer_clients.conftest import Servers

from agentroll.server.schema import JobRequest, JobState
from agentroll.server.serving import RunningServer
from agentroll.trainer_clients import AsyncGroupCollector, AsyncRolloutClient, GroupSpec

pytestmark = pytest.mark.integration
# The server answers an idle long-poll only when `wait` ends, and stops only after that.
FAST = {"poll_wait_s": 0.5}


def request(**instance: Any) -> JobRequest:
    return JobRequest(handler="steered", instance=instance)


async def test_infra_failures_are_resubmitted_and_the_group_is_whole(servers: Servers) -> None:
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST, max_retries=2) as collector,
    ):
        fail = {"g0-s1-r0": "infra", "g0-s1-r1": "infra", "g0-s3-r0": "infra"}
        await collector.submit("g0", request(fail=fail, rewards=[1, 0, 1, 0]), n=4)
        group = await collector.next_group(timeout_s=30)

    assert group is not None and group.valid and group.reason is None
    assert [t.job_id for t in group.trajectories] == [
        "g0-s0-r0",
        "g0-s1-r2",
        "g0-s2-r0",
        "g0-s3-r1",
    ]
    assert group.rewards == [1.0, 0.0, 1.0, 0.0]
    assert all(t.outcome == "ok" for t in group.trajectories)
    assert group.dropped == {"infra_error": 3}
    assert group.jobs_submitted == 7
    stats = collector.stats.as_dict()
    assert stats["retries"] == 3 and stats["groups_valid"] == 1
    assert stats["dropped_infra_error"] == 3 and stats["groups_pending"] == 0


async def test_samples_a_verifier_masked_are_dropped_and_resampled(servers: Servers) -> None:
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST, max_retries=2) as collector,
    ):
        masked = ["m-s1-r0", "m-s2-r0"]
        await collector.submit("m", request(mask=masked, rewards=[1, 1, 0]), n=3)
        group = await collector.next_group(timeout_s=30)

    assert group is not None and group.valid
    assert [t.job_id for t in group.trajectories] == ["m-s0-r0", "m-s1-r1", "m-s2-r1"]
    assert not any(t.metadata.get("mask_sample") for t in group.trajectories)
    assert group.dropped == {"masked": 2}
    assert collector.stats.as_dict()["dropped_masked"] == 2


async def test_group_that_cannot_complete_is_reported_invalid_not_short(servers: Servers) -> None:
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST, max_retries=1) as collector,
    ):
        await collector.submit("bad", request(fail_samples=[2]), n=3)
        await collector.submit("good", request(), n=3)
        groups = {g.group_id: g async for g in collector.groups(timeout_s=30)}

    bad, good = groups["bad"], groups["good"]
    assert not bad.valid
    assert bad.reason is not None and "cannot complete" in bad.reason
    assert bad.dropped == {"infra_error": 2}  # the first try and its one retry
    assert "bad-s2-r1" not in [t.job_id for t in bad.trajectories]
    assert good.valid and len(good.trajectories) == 3
    assert collector.stats.groups_invalid == 1 and collector.stats.groups_valid == 1


async def test_budget_runs_out_the_group_is_invalid_and_its_jobs_cancelled(
    servers: Servers,
) -> None:
    async with servers(1) as [server], AsyncRolloutClient(server.url) as client:
        async with AsyncGroupCollector(
            server.url, pool_options=FAST, group_timeout_s=1.0
        ) as collector:
            await collector.submit("slow", request(sleep={"1": 60}), n=2)
            group = await collector.next_group(timeout_s=30)
        assert group is not None and not group.valid
        assert group.reason is not None
        assert "budget of 1 s spent waiting on samples [1]: 1/2 usable" in group.reason
        view = await client.job("slow-s1-r0")
        assert view.state == JobState.cancelled  # not left running on the server


async def wait_cancelled(client: AsyncRolloutClient, job_id: str) -> JobState:
    view = await client.job(job_id)
    for _ in range(50):  # cancellation is sent in the background
        if view.state.terminal:
            break
        await asyncio.sleep(0.1)
        view = await client.job(job_id)
    return view.state


async def test_spares_stand_in_for_infra_failures_by_index_not_by_speed(servers: Servers) -> None:
    async with servers(1) as [server], AsyncRolloutClient(server.url) as client:
        async with AsyncGroupCollector(
            server.url, pool_options=FAST, oversample=2, max_retries=0
        ) as collector:
            # member 0 is lost to infra; spare 2 (slower than spare 3) stands in: index order
            slow = request(fail_samples=[0], sleep={"2": 1.0, "3": 60})
            await collector.submit("os", slow, n=2)
            group = await collector.next_group(timeout_s=30)
            assert group is not None and group.valid
            assert [t.job_id for t in group.trajectories] == ["os-s1-r0", "os-s2-r0"]
            assert group.jobs_submitted == 4 and group.dropped == {"infra_error": 1}
            assert await wait_cancelled(client, "os-s3-r0") == JobState.cancelled
        assert collector.stats.extras_cancelled == 1


async def test_first_finished_stays_available_and_keeps_the_fastest(servers: Servers) -> None:
    async with servers(1) as [server], AsyncRolloutClient(server.url) as client:
        async with AsyncGroupCollector(
            server.url, pool_options=FAST, oversample=2, selection="first_finished"
        ) as collector:
            await collector.submit("ff", request(sleep={"0": 60, "3": 60}), n=2)
            group = await collector.next_group(timeout_s=30)
            assert group is not None and group.valid
            assert [t.job_id for t in group.trajectories] == ["ff-s1-r0", "ff-s2-r0"]
            for job_id in ("ff-s0-r0", "ff-s3-r0"):
                assert await wait_cancelled(client, job_id) == JobState.cancelled
        assert collector.stats.extras_cancelled == 2
        assert collector.stats.as_dict()["unused_unfinished"] == 2  # the slow ones, cancelled


async def test_zero_variance_groups_are_flagged(servers: Servers) -> None:
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST) as collector,
    ):
        done = await collector.collect(
            [
                GroupSpec("flat", request(rewards=[1, 1, 1]), 3),
                GroupSpec("mixed", request(rewards=[1, 0, 1]), 3),
            ],
            timeout_s=30,
        )
    flags = {g.group_id: g.zero_variance for g in done}
    assert flags == {"flat": True, "mixed": False}
    assert collector.stats.zero_variance == 1


async def sampled(url: str) -> int:
    """Generation requests the scripted backend has received so far."""
    async with httpx.AsyncClient(base_url=url) as http:
        return len((await http.get("/scripted/requests")).json()["requests"])


@pytest.mark.parametrize("mode", ["drop", "flag"])
async def test_stale_samples_are_dropped_and_resampled_or_flagged(
    servers: Servers, scripted_llm: RunningServer, mode: str
) -> None:
    async with servers(1) as [server], AsyncRolloutClient(server.url) as client:
        await client.add_backend({"id": "llm", "base_url": scripted_llm.url})
        async with AsyncGroupCollector(
            server.url,
            pool_options=FAST,
            max_policy_lag=1,
            stale=mode,
            max_retries=1,  # type: ignore[arg-type]
        ) as collector:
            assert collector.pool is not None
            # sampled at version 0, then held while the trainer moves to version 3
            before = await sampled(scripted_llm.url)
            await collector.submit("st", request(generate=True, hold_s=1.0), n=2)
            async with asyncio.timeout(30):  # both sampled before the pause, not after it
                while await sampled(scripted_llm.url) < before + 2:
                    await asyncio.sleep(0.02)
            await collector.pool.pause("wait", timeout_s=10)
            await collector.pool.resume(3)
            group = await collector.next_group(timeout_s=30)

    assert group is not None and group.valid
    versions = [t.policy_versions for t in group.trajectories]
    if mode == "drop":
        assert versions == [[3], [3]]  # resampled under the current policy
        assert [t.job_id for t in group.trajectories] == ["st-s0-r1", "st-s1-r1"]
        assert group.dropped == {"stale": 2} and collector.stats.stale_dropped == 2
    else:
        assert versions == [[0], [0]]
        assert sorted(group.stale) == ["st-s0-r0", "st-s1-r0"]
        assert collector.stats.stale_flagged == 2
