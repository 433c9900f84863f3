"""Batches worth training on, against real in-process servers and the scripted LLM: dynamic
sampling fed by a persisted curriculum, reward components end to end, the circuit breaker."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.trainer_clients.conftest import Servers

from agentroll.server.schema import JobRequest
from agentroll.server.serving import RunningServer
from agentroll.trainer_clients import (
    AsyncDynamicSampler,
    AsyncGroupCollector,
    AsyncRolloutClient,
    CurriculumSampler,
    DynamicSampler,
    GroupCollector,
    GroupSpec,
    InfraCircuitOpen,
    PassRates,
)
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration
FAST = {"poll_wait_s": 0.5}
# every sample of "solved" passes; "learning" is passed by half its samples
TASKS: dict[str, dict[str, Any]] = {
    "solved": {"rewards": [1, 1, 1, 1]},
    "learning": {"rewards": [1, 0, 1, 0], "components": {"correct": [1, 0, 1, 0]}},
}


def request_for(task: str) -> JobRequest:
    return JobRequest(handler="steered", instance={"generate": True, **TASKS[task]})


async def test_a_curriculum_fed_batch_keeps_only_groups_that_teach(
    servers: Servers, scripted_llm: RunningServer, tmp_path: Path
) -> None:
    path = tmp_path / "pass_rates.json"
    async with servers(1) as [server], AsyncRolloutClient(server.url) as client:
        await client.add_backend({"id": "llm", "base_url": scripted_llm.url})
        async with AsyncGroupCollector(server.url, pool_options=FAST) as collector:
            rates = PassRates(path)
            curriculum = CurriculumSampler(rates, sorted(TASKS), seed=3)
            specs = curriculum.stream(request_for, n=4, id_prefix="step0-")
            batch = await AsyncDynamicSampler(collector, specs).next_batch(3, timeout_s=60)
            rates.record_groups(batch.groups + batch.dropped)
            stats = collector.stats.as_dict()

    # the seeded draw: learning, solved, learning, solved, solved, learning
    assert [g.group_id for g in batch.groups] == ["step0-0", "step0-2", "step0-5"]
    assert [g.group_id for g in batch.dropped] == ["step0-1", "step0-3", "step0-4"]
    assert {g.task_id for g in batch.groups} == {"learning"}
    assert {g.task_id for g in batch.dropped} == {"solved"}
    for group in batch.groups:
        assert group.rewards == [1.0, 0.0, 1.0, 0.0] and not group.zero_variance
        # real tokens from the scripted LLM, and the handler's components beside the reward
        assert all(t.response_ids and t.segments for t in group.trajectories)
        assert [t.reward_components for t in group.trajectories] == [
            {"correct": 1.0}, {"correct": 0.0}, {"correct": 1.0}, {"correct": 0.0}
        ]  # fmt: skip
    assert stats["dynamic_groups_generated"] == 6 and stats["dynamic_kept_fraction"] == 0.5
    assert stats["dynamic_rollouts_spent"] == 24 == batch.rollouts_spent

    restarted = PassRates(path)  # what the next run's curriculum starts from
    assert restarted.get("learning").pass_rate == 0.5
    assert restarted.get("learning").samples == 12
    assert restarted.get("solved").pass_rate == 1.0
    weights = CurriculumSampler(restarted, sorted(TASKS))
    assert [weights.weight("learning"), weights.weight("solved")] == [1.0, 0.1]


async def test_a_group_without_components_comes_back_without_the_field(
    servers: Servers,
) -> None:
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST) as collector,
    ):
        await collector.submit("plain", JobRequest(handler="steered", instance={}), n=2)
        group = await collector.next_group(timeout_s=30)
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            raw = await http.get("/v1/results", params={"after": 0})
    assert group is not None and group.valid
    assert all(t.reward_components is None for t in group.trajectories)
    assert raw.status_code == 200 and "plain-s0-r0" in raw.text
    assert "reward_components" not in raw.text


async def test_a_sandbox_that_always_fails_opens_the_breaker_with_its_cause(
    servers: Servers,
) -> None:
    broken = JobRequest(handler="steered", instance={"fail_samples": [0, 1, 2]})
    async with (
        servers(1) as [server],
        AsyncGroupCollector(
            server.url, pool_options=FAST, max_retries=50, max_consecutive_infra_errors=5
        ) as collector,
    ):
        await collector.submit("broken", broken, n=3)
        group = await collector.next_group(timeout_s=60)
        with pytest.raises(InfraCircuitOpen) as raised:
            await collector.next_group(timeout_s=60)
    assert group is not None and not group.valid and "circuit breaker" in (group.reason or "")
    message = str(raised.value)
    assert "5 infra_errors in a row" in message
    assert "sandbox_lost at run" in message and "'sandbox vanished'" in message


async def test_the_blocking_sampler_fills_a_batch(servers: Servers) -> None:
    def blocking(url: str) -> None:
        same = JobRequest(handler="steered", instance={"rewards": [0, 0]})
        mixed = JobRequest(handler="steered", instance={"rewards": [0, 1]})
        specs = [GroupSpec("s", same, 2), GroupSpec("m", mixed, 2)]
        with GroupCollector(url) as collector:
            batch = DynamicSampler(collector, specs).next_batch(1, timeout_s=60)
        assert [g.group_id for g in batch.groups] == ["m"]
        assert [g.group_id for g in batch.dropped] == ["s"]
        assert collector.stats.dynamic.groups_generated == 2

    async with servers(1) as [server]:
        await asyncio.to_thread(blocking, server.url)


async def test_a_handler_reporting_a_component_that_is_not_finite_is_an_infra_error(
    servers: Servers,
) -> None:
    """The handler's bug, not the policy's: no reward, and the cause says what was wrong."""
    bad = JobRequest(handler="steered", instance={"components": {"x": ["inf", "inf"]}})
    async with (
        servers(1) as [server],
        AsyncGroupCollector(server.url, pool_options=FAST, max_retries=0) as collector,
    ):
        await collector.submit("bad", bad, n=2)
        group = await collector.next_group(timeout_s=30)
        async with AsyncRolloutClient(server.url) as client:
            results = (await client.results()).results
    assert group is not None and not group.valid
    assert group.dropped == {"infra_error": 2}
    assert [t.outcome.value for t in results] == ["infra_error", "infra_error"]
    assert all(t.reward is None and t.reward_components is None for t in results)
    error = results[0].error
    assert error is not None and error.type == "trajectory_failed"
    assert "reward component 'x' is not finite" in error.message
