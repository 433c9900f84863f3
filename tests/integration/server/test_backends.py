"""The backend pool: affinity, drain, health checks, and a backend killed mid-run."""

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.test_trajectory import Parrot

from agentroll.handlers import HandlerRegistry
from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

WORDS = ["one", "two", "three", "four"]


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    r.register(Parrot)
    return r


def jobs(n: int, prefix: str = "p") -> list[dict[str, object]]:
    return [
        {
            "job_id": f"{prefix}{i}",
            "handler": "parrot",
            "instance": {"words": [f"{prefix}{i}", *WORDS]},
        }
        for i in range(n)
    ]


@pytest.fixture
async def two_backends() -> AsyncIterator[list[RunningServer]]:
    servers = [
        await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=0.05, seed=i)))
        for i in range(2)
    ]
    yield servers
    for server in servers:
        await server.stop()


async def calls(url: str) -> int:
    async with httpx.AsyncClient(base_url=url) as http:
        return len((await http.get("/scripted/requests")).json()["requests"])


async def test_turns_of_a_trajectory_stay_on_one_backend(
    agentroll_server: ServerFactory, two_backends: list[RunningServer]
) -> None:
    async with agentroll_server(registry=registry()) as (_, client):
        for i, backend in enumerate(two_backends):
            await client.add_backend({"id": f"b{i}", "base_url": backend.url})
        batch = jobs(40)
        await client.submit(batch)
        results = await client.wait_for([str(j["job_id"]) for j in batch], 60)
    used: Counter[str] = Counter()
    for t in results.values():
        backends = {s.backend_id for s in t.segments}
        assert len(backends) == 1, f"{t.job_id} hopped backends: {backends}"  # prefix-cache reuse
        used.update(backends)
    assert set(used) == {"b0", "b1"}  # load still spreads across backends


async def test_drained_backend_gets_no_new_requests_and_leaves(
    agentroll_server: ServerFactory, two_backends: list[RunningServer]
) -> None:
    a, b = two_backends
    async with agentroll_server(registry=registry()) as (server, client):
        await client.add_backend({"id": "a", "base_url": a.url})
        await client.add_backend({"id": "b", "base_url": b.url})
        await client.submit(jobs(30))
        while await calls(a.url) < 10:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            r = await http.post("/v1/backends/a/drain")
            assert r.status_code == 202 and r.json()["draining"] is True
        async with asyncio.timeout(10):
            while [x.id for x in await client.backends()] != ["b"]:  # removed once idle
                await asyncio.sleep(0.02)
        after_drain = await calls(a.url)
        results = await client.wait_for([f"p{i}" for i in range(30)], 60)
        assert await calls(a.url) == after_drain  # nothing new reached it
    assert {t.outcome for t in results.values()} == {Outcome.ok}


async def test_unhealthy_backend_is_avoided_until_it_recovers(
    agentroll_server: ServerFactory, two_backends: list[RunningServer]
) -> None:
    a, b = two_backends
    async with agentroll_server(registry=registry(), health_interval_s=0.05) as (_, client):
        await client.add_backend({"id": "a", "base_url": a.url})
        await client.add_backend({"id": "b", "base_url": b.url})
        async with httpx.AsyncClient(base_url=a.url) as http:
            await http.post("/scripted/fault", json={"healthy": False})
            async with asyncio.timeout(10):
                while next(x for x in await client.backends() if x.id == "a").healthy:
                    await asyncio.sleep(0.02)
            before = await calls(a.url)
            await client.submit(jobs(10))
            await client.wait_for([f"p{i}" for i in range(10)], 60)
            assert await calls(a.url) == before  # routed around it
            await http.post("/scripted/fault", json={"healthy": True})
            async with asyncio.timeout(10):
                while not next(x for x in await client.backends() if x.id == "a").healthy:
                    await asyncio.sleep(0.02)


async def test_backend_killed_mid_run_never_becomes_reward_zero(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    args = ["scripted-llm", "--port", "0", "--latency-s", "0.3"]
    with (
        agentroll_process(args, tmp_path, "victim") as victim,
        agentroll_process(args, tmp_path, "survivor") as survivor,
    ):
        async with agentroll_server(registry=registry(), health_interval_s=0.2) as (_, client):
            await client.add_backend({"id": "victim", "base_url": victim.url})
            await client.add_backend({"id": "survivor", "base_url": survivor.url})
            batch = jobs(40)
            await client.submit(batch)
            await asyncio.sleep(0.8)  # every rollout is a turn or two in
            victim.kill(signal.SIGKILL)
            results = await client.wait_for([str(j["job_id"]) for j in batch], 120)
    outcomes = Counter(t.outcome for t in results.values())
    assert set(outcomes) <= {Outcome.ok, Outcome.infra_error}
    for t in results.values():
        if t.outcome is Outcome.infra_error:
            assert t.reward is None
        else:
            assert t.reward == 1.0  # the parrot repeats correctly wherever it ran
    moved = [
        t for t in results.values() if {s.backend_id for s in t.segments} == {"victim", "survivor"}
    ]
    assert moved, "rollouts on the killed backend continue on the survivor"
    assert all(any(r["backend"] == "victim" for r in t.metadata["llm_retries"]) for t in moved)
