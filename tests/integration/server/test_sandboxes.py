"""Rollouts in real bubblewrap sandboxes, owned and torn down by the server."""

import asyncio
import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.server.sandbox_handlers import sandbox_registry
from tests.support.sandbox_procs import owned_sandbox_processes

from agentroll.runtime import BwrapConfig
from agentroll.server.schema import JobState, Outcome
from agentroll.server.serving import RunningServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]


def sandbox_processes(server: RunningServer) -> set[int]:
    """The live processes of the sandboxes `server` started (by their owner marker): other
    tests' and other servers' sandboxes on a shared node are not this test's to count."""
    return set(owned_sandbox_processes(server.server.config.app.state.server.runtime.instance_id))


async def until_gone(server: RunningServer, timeout_s: float = 30) -> set[int]:
    async with asyncio.timeout(timeout_s):
        while left := sandbox_processes(server):
            await asyncio.sleep(0.05)
    return left


def settings(tmp_path: Path) -> dict[str, object]:
    return {"sandbox": BwrapConfig(state_dir=tmp_path / "sandboxes")}


async def test_sandbox_lives_for_the_rollout_and_is_torn_down(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (
        server,
        client,
    ):
        await client.submit([{"job_id": "w", "handler": "writer", "instance": {}}])
        t = (await client.wait_for(["w"], 60))["w"]
        assert (t.outcome, t.reward) == (Outcome.ok, 1.0)
        assert t.reward_info["eval_sandbox_id"] == t.reward_info["sandbox_id"]  # reused
        assert t.timing.sandbox_start_s > 0
        assert await until_gone(server) == set()


async def test_fresh_eval_never_sees_the_agents_sandbox(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (_, client):
        await client.submit([{"job_id": "f", "handler": "fresh-eval", "instance": {}}])
        t = (await client.wait_for(["f"], 60))["f"]
    assert t.outcome is Outcome.ok and t.reward == 0.0  # the file lived in the RUN sandbox only
    assert t.reward_info["eval_sandbox_id"] != t.reward_info["sandbox_id"]


async def test_eval_in_the_agents_sandbox_starts_once_its_processes_are_gone(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        {"job_id": "stopped", "handler": "lingerer", "instance": {}},
        {"job_id": "kept", "handler": "lingerer-kept", "instance": {}},
    ]
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (_, client):
        await client.submit(jobs)
        done = await client.wait_for(["stopped", "kept"], 60)
    assert (done["stopped"].outcome, done["stopped"].reward) == (Outcome.ok, 1.0), done[
        "stopped"
    ].reward_info
    # Opted out: the agent's writer still runs while EVAL reads (the file changes under it).
    assert (done["kept"].outcome, done["kept"].reward) == (Outcome.ok, 0.0)


async def test_a_python_tool_is_started_during_init(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Its kernel is up before RUN: the first python call costs what any other does, and its
    start-up is reported apart from the calls' latency."""
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (_, client):
        await client.submit([{"job_id": "warm", "handler": "warm-python", "instance": {}}])
        t = (await client.wait_for(["warm"], 60))["warm"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), t.error
    assert t.timing.tool_startup_s > 0 and t.timing.tool_calls == 0


async def test_sandbox_that_cannot_start_is_infra_error(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (_, client):
        await client.submit([{"job_id": "b", "handler": "bad-image", "instance": {}}])
        t = (await client.wait_for(["b"], 60))["b"]
    assert (t.outcome, t.reward) == (Outcome.infra_error, None)
    assert t.error is not None and (t.error.type, t.error.stage) == ("sandbox_start_failed", "init")


async def test_fork_bomb_is_contained_and_the_server_stays_healthy(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with agentroll_server(registry=sandbox_registry(), **settings(tmp_path)) as (
        server,
        client,
    ):
        await client.submit([{"job_id": "fb", "handler": "fork-bomb", "instance": {}}])
        t = (await client.wait_for(["fb"], 120))["fb"]
        assert (await client.status()).accepting
        await client.submit([{"job_id": "next", "handler": "writer", "instance": {}}])
        assert (await client.wait_for(["next"], 60))["next"].reward == 1.0
        assert await until_gone(server) == set()
    assert t.outcome is Outcome.ok and t.reward == 1.0  # the agent saw an observation, not a crash


async def test_200_cancelled_sandboxed_rollouts_leave_no_process(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    pools = {"init": 16, "run": 64, "ready_buffer": 32}
    ids = [f"s{i}" for i in range(200)]
    admission = {"live_when_busy": 64}  # 40 in RUN however busy the node is
    async with agentroll_server(
        registry=sandbox_registry(), pools=pools, admission=admission, **settings(tmp_path)
    ) as (server, client):
        await client.submit([{"job_id": i, "handler": "sleeper", "instance": {}} for i in ids])
        async with asyncio.timeout(120):  # cancel with jobs in every state: queued .. run
            while (await client.status()).jobs_by_state.get("run", 0) < 40:
                await asyncio.sleep(0.05)
        states = (await client.status()).jobs_by_state
        assert sandbox_processes(server)  # the count sees this server's sandboxes
        cancelled = await client.cancel_where(all=True)
        assert sorted(cancelled) == sorted(ids)
        results = await client.wait_for(ids, 60)
        assert {t.outcome for t in results.values()} == {Outcome.cancelled}
        assert await until_gone(server, timeout_s=60) == set()
        assert list((tmp_path / "sandboxes").rglob("*.sock")) == []
    assert states.get(JobState.queued.value, 0) > 0 and states.get(JobState.run.value, 0) >= 40
