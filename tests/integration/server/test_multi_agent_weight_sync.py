"""Per-policy weight sync: pausing one policy leaves the other agents generating, and each
segment carries the version of the policy that sampled it."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.multi_agent_support import (
    agent,
    backend_log,
    duet_job,
    registry,
    serve_policies,
)
from tests.integration.server.test_exactly_once import state_of
from tests.integration.server.test_metrics import scrape
from tests.integration.server.test_weight_sync import assert_exact

from agentroll.server.schema import Outcome
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

PHRASES = ["one", "two three", "four", "five six", "seven", "eight"]


@pytest.fixture
async def slow_backends() -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    alpha = await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=0.3, seed=5)))
    beta = await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=0.3, seed=6)))
    yield alpha, beta
    await alpha.stop()
    await beta.stop()


async def _until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not await condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout_s:g} s") from None


@pytest.mark.parametrize("mode", ["wait", "abort", "keep"])
async def test_pausing_one_policy_leaves_the_other_generating(
    agentroll_server: ServerFactory, slow_backends: tuple[RunningServer, RunningServer], mode: str
) -> None:
    alpha, beta = slow_backends
    async with agentroll_server(registry=registry(), pools={"run": 64}) as (server, client):
        await serve_policies(client, alpha.url, beta.url)
        ids = [f"d{i}" for i in range(30)]
        await client.submit(  # distinct conversations: every prompt identifies its rollout
            [duet_job(i, [i, *PHRASES], [f"{i} again", *PHRASES]) for i in ids]
        )

        async def alpha_mid_flight() -> bool:
            return len(await backend_log(alpha.url)) >= 45

        await _until(alpha_mid_flight, "alpha halfway")
        paused = await client.pause(mode=mode, timeout_s=30, policy="alpha")  # type: ignore[arg-type]
        assert (paused.policy, paused.paused, paused.mode) == ("alpha", True, mode)
        assert paused.backend_errors == {}
        alpha_calls = len(await backend_log(alpha.url))
        beta_calls = len(await backend_log(beta.url))

        async def beta_moved_on() -> bool:  # the other policy keeps generating meanwhile
            return len(await backend_log(beta.url)) >= beta_calls + 30

        await _until(beta_moved_on, "beta generating while alpha is paused")
        assert len(await backend_log(alpha.url)) == alpha_calls  # nothing reached alpha
        status = await client.status()
        assert status.policies["alpha"].paused and not status.policies["beta"].paused
        held = status.policies["alpha"]
        # Speakers wait at alpha's gate; in keep mode they may all be parked in its engine.
        assert held.queued > 0 or (mode == "keep" and held.in_flight > 0)
        assert not status.paused and status.policy_version == 0  # the default policy: untouched
        metrics = await scrape(server.url)
        assert metrics[("agentroll_policy_paused", (("policy", "alpha"),))] == 1
        assert metrics[("agentroll_policy_paused", (("policy", "beta"),))] == 0
        assert metrics[("agentroll_policy_queued", (("policy", "alpha"),))] >= held.queued  # grows
        async with httpx.AsyncClient(base_url=alpha.url) as http:
            await http.post("/update_weight_version", json={"new_version": "1"})
        resumed = await client.resume(policy_version=1, policy="alpha")
        assert (resumed.policy, resumed.paused, resumed.policy_version) == ("alpha", False, 1)
        results = await client.wait_for(ids, 120)
        status = await client.status()
    assert {t.outcome for t in results.values()} == {Outcome.ok}
    assert (status.policies["alpha"].policy_version, status.policies["beta"].policy_version) == (
        1,
        0,
    )
    alpha_log, beta_log = await backend_log(alpha.url), await backend_log(beta.url)
    spanning = 0
    for t in results.values():
        speaker, listener = agent(t, "speaker"), agent(t, "listener")
        versions = [s.policy_version for s in speaker.segments]
        assert versions == sorted(versions)  # never back in time
        spanning += speaker.policy_versions == [0, 1]
        assert {s.policy_version for s in listener.segments} == {0}  # beta was never updated
        assert_exact(speaker, alpha_log)
        assert_exact(listener, beta_log)
    assert spanning, "some speakers' traces must span alpha's update"


async def test_each_policys_pause_and_version_survive_a_restart(
    agentroll_server: ServerFactory, slow_backends: tuple[RunningServer, RunningServer]
) -> None:
    async with agentroll_server(registry=registry()) as (_, client):
        for backend, policy in zip(slow_backends, ("alpha", "beta"), strict=True):
            await client.add_backend({"id": policy, "base_url": backend.url, "policy": policy})
        await client.pause(policy="beta")
        await client.resume(policy_version=3, policy="beta")
        await client.pause(mode="keep", policy="beta")
        await client.pause(policy="alpha")
        await client.resume(policy_version=2, policy="alpha")
    async with agentroll_server(registry=registry()) as (server, client):
        status = await client.status()
        alpha, beta = status.policies["alpha"], status.policies["beta"]
        assert (beta.paused, beta.mode, beta.policy_version) == (True, "keep", 3)
        assert (alpha.paused, alpha.policy_version) == (False, 2)
        assert (status.paused, status.policy_version) == (False, 0)  # default: untouched
        assert state_of(server).policies.get("beta").gate.mode == "keep"
        await client.resume(policy_version=4, policy="beta")
    async with agentroll_server(registry=registry()) as (_, client):
        beta = (await client.status()).policies["beta"]
        assert (beta.paused, beta.policy_version) == (False, 4)


async def test_resume_cannot_take_one_policy_back_in_version(
    agentroll_server: ServerFactory, slow_backends: tuple[RunningServer, RunningServer]
) -> None:
    async with agentroll_server(registry=registry()) as (server, client):
        await client.add_backend({"id": "a", "base_url": slow_backends[0].url, "policy": "alpha"})
        await client.resume(policy_version=3, policy="alpha")
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            r = await http.post(
                "/v1/generation/resume", json={"policy_version": 2, "policy": "alpha"}
            )
        assert (r.status_code, r.json()["error"]["type"]) == (409, "conflict")
        assert r.json()["error"]["message"] == (
            "policy_version 2 is older than the current 3 of policy 'alpha'"
        )
        assert (await client.resume(policy_version=1)).policy_version == 1  # default: its own


async def test_a_policy_nothing_serves_or_uses_cannot_be_paused(
    agentroll_server: ServerFactory, slow_backends: tuple[RunningServer, RunningServer]
) -> None:
    """A mistyped name must not look paused while the policy meant keeps generating."""
    async with agentroll_server(registry=registry()) as (server, client):
        await client.add_backend({"id": "a", "base_url": slow_backends[0].url, "policy": "alpha"})
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            for action, body in (("pause", {}), ("resume", {"policy_version": 1})):
                r = await http.post(f"/v1/generation/{action}", json={**body, "policy": "aplha"})
                assert (r.status_code, r.json()["error"]["type"]) == (404, "not_found")
                assert r.json()["error"]["message"] == (
                    "no policy 'aplha': no registered backend serves it and no job names it "
                    "(known: alpha, default)"
                )
        status = await client.status()
        assert "aplha" not in status.policies and not status.policies["alpha"].paused
        assert (await client.pause(policy="alpha")).paused  # the policy meant still can be


async def test_staleness_is_judged_per_trainable_agent(
    agentroll_server: ServerFactory, slow_backends: tuple[RunningServer, RunningServer]
) -> None:
    alpha, beta = slow_backends
    async with agentroll_server(registry=registry()) as (server, client):
        await serve_policies(client, alpha.url, beta.url)
        await client.resume(policy_version=5, max_policy_lag=1, policy="alpha")
        stale = duet_job("stale", ["a"], ["b"])
        stale["agents"]["speaker"]["policy_version"] = 3
        frozen = duet_job("frozen", ["a"], ["b"])  # the same lag, on an untrainable agent
        frozen["agents"]["speaker"].update(policy_version=3, trainable=False)
        fresh = duet_job("fresh", ["a"], ["b"])  # stamped with the current versions
        await client.submit([stale, frozen, fresh])
        done = await client.wait_for(["stale", "frozen", "fresh"], 60)
        row = await state_of(server).store.get_job("fresh")
    t = done["stale"]
    assert (t.outcome, t.reward) == (Outcome.cancelled, None)
    assert t.error is not None and t.error.type == "stale_policy"
    assert t.error.message == "policy 'alpha' version 3 lags the current 5 by more than 1"
    assert t.timing.run is None  # never started
    assert done["frozen"].outcome is Outcome.ok
    assert done["fresh"].outcome is Outcome.ok
    assert agent(done["fresh"], "speaker").policy_versions == [5]
    assert row is not None
    stamped = json.loads(row.request_json)["agents"]
    assert (stamped["speaker"]["policy_version"], stamped["listener"]["policy_version"]) == (5, 0)
