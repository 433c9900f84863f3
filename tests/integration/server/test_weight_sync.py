"""Pause/resume around a weight update, with hundreds of rollouts in flight."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.server.schema import Outcome, Trajectory
from agentroll.server.scripted_llm import ScriptedLLMConfig
from agentroll.server.scripted_llm import create_app as create_scripted_app
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.trainer_clients import AsyncRolloutClient
from tests.conftest import ServerFactory
from tests.integration.server.test_trajectory import Parrot

pytestmark = pytest.mark.integration

WORDS = ["one", "two three", "four", "five six", "seven"]


@pytest.fixture
async def slow_backend() -> AsyncIterator[RunningServer]:
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=0.2, seed=5)))
    yield server
    await server.stop()


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    r.register(Parrot)
    return r


async def backend_log(url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as http:
        return list((await http.get("/scripted/requests")).json()["requests"])


def assert_exact(t: Trajectory, log: list[dict[str, Any]]) -> None:
    """Invariants 1 and 3 against the backend's own record of every call."""
    by_prompt = {tuple(c["prompt_token_ids"]): c for c in log}
    for seg in t.segments:
        call = by_prompt[tuple(t.prompt_ids + t.response_ids[: seg.start])]
        assert t.response_ids[seg.start : seg.end] == call["token_ids"][: seg.end - seg.start]


async def test_wait_pause_is_a_barrier_and_versions_are_stamped(
    agentroll_server: ServerFactory, slow_backend: RunningServer
) -> None:
    async with agentroll_server(registry=registry(), pools={"run": 256}) as (_, client):
        await client.add_backend({"id": "b", "base_url": slow_backend.url})
        ids = [f"p{i}" for i in range(200)]
        await client.submit(
            [
                {"job_id": i, "handler": "parrot", "instance": {"words": [i, *WORDS]}}
                for i in ids  # distinct conversations: every prompt identifies its rollout
            ]
        )
        while len(await backend_log(slow_backend.url)) < 400:  # mid-flight: ~2 of 6 turns each
            await asyncio.sleep(0.02)
        paused = await client.pause(mode="wait", timeout_s=30)
        assert paused.paused and paused.in_flight == 0 and paused.mode == "wait"
        calls_at_pause = len(await backend_log(slow_backend.url))
        await asyncio.sleep(0.5)  # rollouts keep running, but nothing reaches a backend
        assert len(await backend_log(slow_backend.url)) == calls_at_pause
        status = await client.status()
        assert status.paused and status.jobs_by_state.get("run", 0) > 0
        resumed = await client.resume(policy_version=1)
        assert (resumed.paused, resumed.policy_version) == (False, 1)
        results = await client.wait_for(ids, 120)
    log = await backend_log(slow_backend.url)
    assert {t.outcome for t in results.values()} == {Outcome.ok}  # none lost
    spanning = [t for t in results.values() if t.policy_versions == [0, 1]]
    assert spanning, "some trajectories must span the update"
    for t in results.values():
        versions = [s.policy_version for s in t.segments]
        assert versions == sorted(versions)  # never back in time
        assert_exact(t, log)


async def test_resume_cannot_go_back_in_version(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=registry()) as (server, client):
        await client.pause()
        await client.resume(policy_version=3)
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/v1/generation/resume", json={"policy_version": 2})
            assert r.status_code == 409 and r.json()["error"]["type"] == "conflict"
        assert (await client.status()).policy_version == 3


async def test_stale_jobs_are_not_started(
    agentroll_server: ServerFactory, slow_backend: RunningServer
) -> None:
    async with agentroll_server(registry=registry(), pools={"init": 1}) as (_, client):
        await client.add_backend({"id": "b", "base_url": slow_backend.url})
        await client.pause()
        await client.resume(policy_version=5, max_policy_lag=1)
        await client.submit(
            [
                {
                    "job_id": "old",
                    "handler": "parrot",
                    "instance": {"words": ["a"]},
                    "policy_version": 3,
                },
                {
                    "job_id": "fresh",
                    "handler": "parrot",
                    "instance": {"words": ["a"]},
                    "policy_version": 4,
                },
                {"job_id": "default", "handler": "parrot", "instance": {"words": ["a"]}},
            ]
        )
        done = await client.wait_for(["old", "fresh", "default"], 30)
    old = done["old"]
    assert (old.outcome, old.reward) == (Outcome.cancelled, None)
    assert old.error is not None and old.error.type == "stale_policy"
    assert old.timing.run is None  # never started
    assert done["fresh"].outcome is Outcome.ok and done["fresh"].policy_versions == [5]
    assert done["default"].outcome is Outcome.ok  # stamped with the server's version
