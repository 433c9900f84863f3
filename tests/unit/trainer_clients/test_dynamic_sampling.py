"""Dynamic sampling over fake servers (virtual clock): groups with equal rewards are dropped
and refilled from the stream, in stream order whatever finishes first, within a cap."""

import re

import pytest
from tests.unit.trainer_clients.fake_servers import collector_over

from agentroll.server.schema import JobRequest, Outcome
from agentroll.testing.fake_rollout_server import FakeRolloutServer, SimulatedRun
from agentroll.trainer_clients import AsyncDynamicSampler, BatchShortfall, GroupSpec

SAMPLE = re.compile(r"-s(\d+)-r\d+$")


def steered(request: JobRequest) -> SimulatedRun:
    """Per group, from its instance: `rewards` per sample, `seconds` per try, `infra`: every
    try of these samples fails."""
    instance = request.instance
    found = SAMPLE.search(request.job_id or "")
    k = int(found.group(1)) if found else 0
    seconds = float(instance.get("seconds", 1.0))
    if k in instance.get("infra", []):
        return SimulatedRun(Outcome.infra_error, None, seconds)
    return SimulatedRun(Outcome.ok, float(instance["rewards"][k]), seconds)


def spec(group_id: str, rewards: list[float], **instance: object) -> GroupSpec:
    request = JobRequest(handler="sim", instance={"rewards": rewards, **instance})
    return GroupSpec(group_id, request, len(rewards), task_id=group_id)


MIXED, SAME = [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]


async def test_groups_with_equal_rewards_are_dropped_and_the_batch_refilled() -> None:
    stream = [spec("a", MIXED), spec("b", SAME), spec("c", [0, 0, 0]), spec("d", MIXED),
              spec("e", MIXED), spec("f", MIXED)]  # fmt: skip
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        sampler = AsyncDynamicSampler(collector, stream)
        batch = await sampler.next_batch(3, timeout_s=30)
        stats = collector.stats.as_dict()

    assert [g.group_id for g in batch.groups] == ["a", "d", "e"]
    assert [g.group_id for g in batch.dropped] == ["b", "c"]
    assert all(g.valid and not g.zero_variance for g in batch.groups)
    assert batch.rollouts_spent == 15 and batch.groups_generated == 5
    assert "f-s0-r0" not in server.submitted  # nothing submitted beyond what was needed
    assert stats["dynamic_groups_generated"] == 5 and stats["dynamic_groups_kept"] == 3
    assert stats["dynamic_dropped_zero_variance"] == 2 and stats["dynamic_dropped_invalid"] == 0
    assert stats["dynamic_rollouts_spent"] == 15 and stats["dynamic_rollouts_kept"] == 9
    assert stats["dynamic_kept_fraction"] == 0.6


async def test_without_equal_groups_nothing_extra_is_generated() -> None:
    """The control: a stream of groups that all teach something costs exactly the batch."""
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        sampler = AsyncDynamicSampler(collector, (spec(f"g{i}", MIXED) for i in range(10)))
        batch = await sampler.next_batch(4, timeout_s=30)
    assert [g.group_id for g in batch.groups] == ["g0", "g1", "g2", "g3"]
    assert batch.dropped == [] and len(server.submitted) == 12
    assert collector.stats.dynamic.groups_generated == 4


async def test_a_batch_is_taken_in_stream_order_not_finishing_order() -> None:
    """Early groups are slow, later ones fast: with groups submitted ahead, the fast ones
    finish first, yet the batch is the first groups of the stream, and the fast ones that
    finished past its end open the next batch instead of being thrown away."""
    stream = [spec(f"g{i}", MIXED, seconds=50.0 - 5 * i) for i in range(8)]
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        sampler = AsyncDynamicSampler(collector, stream, lookahead=4)
        first = await sampler.next_batch(3, timeout_s=30)
        second = await sampler.next_batch(3, timeout_s=30)
    assert [g.group_id for g in first.groups] == ["g0", "g1", "g2"]
    assert [g.group_id for g in second.groups] == ["g3", "g4", "g5"]
    # 7 groups went out at once (3 + lookahead 4), and the later ones finished first
    assert [j for j in server.submitted if j.endswith("-s0-r0")][:7] == [
        f"g{i}-s0-r0" for i in range(7)
    ]
    finishing = [r["group_id"] for r in server._feed if r["job_id"].endswith("-s0-r0")]
    assert finishing[:3] == ["g6", "g5", "g4"]  # what keeping the first finishers would take


async def test_invalid_groups_are_dropped_like_equal_ones() -> None:
    stream = [spec("bad", MIXED, infra=[1]), spec("good", MIXED)]
    server = FakeRolloutServer(steered)
    async with collector_over([server], max_retries=0) as collector:
        batch = await AsyncDynamicSampler(collector, stream).next_batch(1, timeout_s=30)
    assert [g.group_id for g in batch.groups] == ["good"]
    assert [g.group_id for g in batch.dropped] == ["bad"] and not batch.dropped[0].valid
    assert collector.stats.dynamic.dropped_invalid == 1


async def test_the_refill_cap_ends_a_batch_the_stream_cannot_fill() -> None:
    endless_same = (spec(f"s{i}", SAME) for i in range(1000))
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        sampler = AsyncDynamicSampler(collector, endless_same, max_refills=5)
        with pytest.raises(BatchShortfall) as raised:
            await sampler.next_batch(2, timeout_s=30)
        stats = collector.stats.dynamic
    assert "kept 0/2 groups after generating 7 (7 with equal rewards, 0 invalid)" in str(
        raised.value
    )
    assert "max_refills 5" in str(raised.value)
    assert len(server.submitted) == 7 * 3  # bounded: size + max_refills groups, no more
    assert stats.shortfalls == 1 and stats.groups_generated == 7 and stats.groups_kept == 0


async def test_a_stream_that_runs_out_hands_back_what_it_kept() -> None:
    stream = [spec("a", MIXED), spec("b", SAME)]
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        with pytest.raises(BatchShortfall, match="the task stream ran out") as raised:
            await AsyncDynamicSampler(collector, stream).next_batch(2, timeout_s=30)
    assert [g.group_id for g in raised.value.batch.groups] == ["a"]


async def test_a_group_the_sampler_did_not_submit_is_refused() -> None:
    server = FakeRolloutServer(steered)
    async with collector_over([server]) as collector:
        await collector.submit_groups([spec("foreign", MIXED)])
        sampler = AsyncDynamicSampler(collector, [spec("own", MIXED)])
        with pytest.raises(RuntimeError, match="foreign was not submitted by this sampler"):
            await sampler.next_batch(1, timeout_s=30)


@pytest.mark.parametrize("mode", ["drop", "flag"])
async def test_a_group_that_waited_for_its_turn_is_judged_stale_again(mode: str) -> None:
    """g1 finishes while g0 is still running and waits; the policy moves on meanwhile. When its
    turn comes it is sampled again in its place (drop), or handed out flagged (flag); never
    silently trained on, and never skipped for being quick."""
    stream = [spec("g0", MIXED, seconds=50.0), spec("g1", MIXED), spec("g2", MIXED)]
    server = FakeRolloutServer(steered)
    async with collector_over([server], max_policy_lag=1, stale=mode) as collector:
        sampler = AsyncDynamicSampler(collector, stream, lookahead=1)
        first = await sampler.next_batch(1, timeout_s=30)
        server.policy_version = collector.policy_version = 2  # a weight update landed
        second = await sampler.next_batch(1, timeout_s=30)
    assert [g.group_id for g in first.groups] == ["g0"] and first.groups[0].stale == []
    if mode == "drop":
        assert [g.group_id for g in second.groups] == ["g1.again1"]
        assert second.groups[0].stale == [] and second.groups[0].task_id == "g1"
        assert [t.policy_versions for t in second.groups[0].trajectories] == [[2]] * 3
        assert collector.stats.dynamic.resampled_stale == 1
        # the stale sampling's tries are part of its cost
        assert second.groups[0].jobs_submitted == 6 and second.rollouts_spent == 6
    else:
        assert [g.group_id for g in second.groups] == ["g1"]
        assert second.groups[0].stale == ["g1-s0-r0", "g1-s1-r0", "g1-s2-r0"]


async def test_a_group_stale_again_past_its_resamplings_is_dropped_invalid() -> None:
    stream = [spec("g0", MIXED, seconds=50.0), spec("g1", MIXED), spec("g2", MIXED)]
    server = FakeRolloutServer(steered)
    async with collector_over([server], max_policy_lag=1, max_retries=0) as collector:
        sampler = AsyncDynamicSampler(collector, stream, lookahead=1)
        await sampler.next_batch(1, timeout_s=30)
        server.policy_version = collector.policy_version = 2
        second = await sampler.next_batch(1, timeout_s=30)
    assert [g.group_id for g in second.groups] == ["g2"]  # sampled after the update
    assert [(g.group_id, g.valid) for g in second.dropped] == [("g1", False)]
    assert "stale when its turn came: g1-s0-r0: default version 0 lags" in (
        second.dropped[0].reason or ""
    )
    assert collector.stats.dynamic.dropped_invalid == 1
