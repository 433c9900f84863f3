"""A call parked in the engine across a weight update is stamped with the version of the
weights that really sampled its tokens, whatever the engine can report about it.

- vLLM 0.33 says which weights sampled which tokens: a call that sampled nothing before the
  update is stamped with the NEW version, not the one it was dispatched under.
- vLLM 0.12-0.32 and SGLang say nothing: agentroll's `keep` pauses such an engine with
  `abort`, so the tokens before the pause come back (old version) and the turn goes on
  after resume.
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.test_weight_sync import WORDS, backend_log, registry, running

from agentroll.server.schema import DEFAULT_POLICY, Outcome, Trajectory
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.scripted_llm.export import export_tokenizer

pytestmark = pytest.mark.integration


async def set_engine_version(url: str, version: str) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/update_weight_version", json={"new_version": version})
        response.raise_for_status()


@pytest.fixture
async def slow_033() -> AsyncIterator[RunningServer]:
    # a long generation time: the pause lands before the first of its few tokens is due
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=8.0, seed=5)))
    yield server
    await server.stop()


async def test_033_a_call_parked_before_its_first_token_carries_the_new_version(
    agentroll_server: ServerFactory, slow_033: RunningServer
) -> None:
    async with agentroll_server(registry=registry()) as (_, client):
        await client.add_backend({"id": "b", "base_url": slow_033.url})
        await client.submit([{"job_id": "j", "handler": "parrot", "instance": {"words": ["hi"]}}])
        while await running(slow_033.url) < 1:
            await asyncio.sleep(0.02)
        await client.pause(mode="keep", timeout_s=30)
        await set_engine_version(slow_033.url, "1")
        await client.resume(policy_version=1)
        result = (await client.wait_for(["j"], 120))["j"]
    assert result.outcome is Outcome.ok
    [call] = await backend_log(slow_033.url)
    [(label, start, end)] = [(r["version"], r["start"], r["end"]) for r in call["weight_versions"]]
    assert (label, start, end) == ("1", 0, len(call["token_ids"]))  # all new weights
    assert [s.policy_version for s in result.segments] == [1]
    assert "mixed_version_segments" not in result.metadata


def exact_versions(t: Trajectory) -> None:
    """Every segment before the pause ends where the engine cut it; none is mixed."""
    versions = [s.policy_version for s in t.segments]
    assert versions == sorted(versions)
    assert "mixed_version_segments" not in t.metadata


@pytest.mark.parametrize("flavor", ["vllm-0.2x", "sglang"])
async def test_keep_without_engine_labels_is_carried_out_as_abort_so_no_segment_mixes_versions(
    agentroll_server: ServerFactory, flavor: str, tmp_path: Path
) -> None:
    config = (
        ScriptedLLMConfig(version="0.2x", latency_s=0.6, seed=5)
        if flavor == "vllm-0.2x"
        else ScriptedLLMConfig(flavor="sglang", latency_s=0.6, seed=5)
    )
    app = create_scripted_app(config)
    backend = await start_in_loop(app)
    try:
        async with agentroll_server(registry=registry(), pools={"run": 64}) as (_, client):
            spec = {"id": "b", "base_url": backend.url, "kind": flavor.split("-", maxsplit=1)[0]}
            if flavor == "sglang":  # it cannot render a continued turn itself
                spec["tokenizer_path"] = str(export_tokenizer(tmp_path / "tokenizer"))
            await client.add_backend(spec)
            ids = [f"k{i}" for i in range(30)]
            long_phrases = [" ".join(WORDS * 8)] * 2  # long replies: a pause lands mid-reply
            await client.submit(
                [
                    {"job_id": i, "handler": "parrot", "instance": {"words": [i, *long_phrases]}}
                    for i in ids
                ]
            )
            while len(await backend_log(backend.url)) < 10 or len(app.state.engine.running) < 5:
                await asyncio.sleep(0.02)  # mid-generation
            paused = await client.pause(mode="keep", timeout_s=30)
            assert (paused.mode, paused.backend_errors) == ("keep", {})
            async with asyncio.timeout(60):  # the partial answers are in; only held calls left
                while (await client.status()).policies[DEFAULT_POLICY].in_flight > (
                    app.state.engine.waiting
                ):
                    await asyncio.sleep(0.02)
            await set_engine_version(backend.url, "1")
            await client.resume(policy_version=1)
            results = await client.wait_for(ids, 120)
    finally:
        await backend.stop()
    assert {t.outcome for t in results.values()} == {Outcome.ok}, [
        t.error for t in results.values() if t.outcome is not Outcome.ok
    ][:2]
    cut = [s for t in results.values() for s in t.segments if s.finish_reason == "abort"]
    assert cut and all(s.policy_version == 0 for s in cut)  # what the engine answered at the pause
    assert any(t.policy_versions == [0, 1] for t in results.values())
    for t in results.values():
        exact_versions(t)
