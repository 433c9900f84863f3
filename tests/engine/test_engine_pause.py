"""A pause in each mode mid-rollout, through agentroll's `/v1/generation/pause` and `/resume`
against the real engine: sampling really stops, and the trajectory stays exact with each
segment stamped with the version it was sampled under."""

import asyncio
from typing import Any

import httpx
import pytest
from tests.engine.conftest import EngineAgentroll
from tests.engine.engine_handlers import chat_registry
from tests.engine.fidelity import metric, sampled_mismatches
from tests.engine.waits import TOKENS, pause_mid_reply

from agentroll.server.engine import VLLMServer
from agentroll.server.schema import PauseMode, Trajectory
from agentroll.testing.scripted_llm import get_tokenizer

LONG_TURN = 3800
"""The first turn: most of the 4096-token context, so the pause lands while it is sampled."""
TRIES = 5
"""The engine samples only in short slices before the pause, but a slice the node's
scheduling stretched past the long turn's end tested nothing: the rollout is run again."""


async def _engine_paused(url: str) -> bool:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        paused: bool = (await http.get("/is_paused")).json()["is_paused"]
    return paused


async def _paused_rollout(
    engine_agentroll: EngineAgentroll, engine: VLLMServer, mode: PauseMode, job_id: str
) -> tuple[Trajectory, dict[str, Any]]:
    url = engine.url
    seen: dict[str, Any] = {}
    job = {
        "job_id": job_id,
        "handler": "chat-turns",
        "instance": {"turns": 2, "max_tokens": [LONG_TURN, 16]},
        # Greedy: the random model never picks EOS here, and a turn sampled again from its
        # partial tokens after an abort is the same turn.
        "sampling": {"temperature": 0.0},
    }
    async with engine_agentroll(registry=chat_registry()) as (_, client):
        pause = await pause_mid_reply(
            client,
            engine,
            lambda: client.submit([job]),
            lambda: client.pause(mode, timeout_s=300),
        )
        if pause is None:  # the rollout ended before its reply was caught: it tested nothing
            t = (await client.wait_for([job_id], 600))[job_id]
            assert t.outcome.value == "ok", t.error
            return t, seen
        seen["in_flight"] = pause.in_flight
        # A retry's server reuses the test's store, and with it the version the last one set.
        seen["version"] = old = pause.policy_version
        seen["engine_paused"] = await _engine_paused(url)
        at_pause = await metric(url, TOKENS)
        await asyncio.sleep(2.0)
        seen["sampled_while_paused"] = await metric(url, TOKENS) - at_pause
        await client.resume(policy_version=old + 1)
        seen["engine_paused_after"] = await _engine_paused(url)
        t = (await client.wait_for([job_id], 600))[job_id]
    assert t.outcome.value == "ok", t.error
    return t, seen


def _landed(mode: PauseMode, t: Trajectory, seen: dict[str, Any]) -> bool:
    """Whether the pause caught the long turn in flight."""
    if not seen:  # no pause at all: the rollout ended before its call was seen
        return False
    if mode == "abort":  # in the long first turn, not the short second one (a late pause)
        return t.segments[0].finish_reason == "abort"
    # `wait`: the pause came before the second turn (the long one finished under it, or
    # just before it: the same to the versions).
    return t.segments[-1].policy_version > seen["version"]


# `keep` on vLLM 0.32 is carried out as abort (its answers do not say which weights sampled
# which tokens); that path, around a real weight push, is test_engine_weight_versions.py's.
@pytest.mark.parametrize("mode", ["abort", "wait"])
async def test_a_pause_mid_rollout_stops_sampling_and_keeps_the_trajectory_exact(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer, mode: PauseMode
) -> None:
    for attempt in range(TRIES):
        t, seen = await _paused_rollout(engine_agentroll, vllm_engine, mode, f"p{attempt}")
        if _landed(mode, t, seen):
            break
    else:
        pytest.fail(f"no {mode} pause caught the {LONG_TURN}-token turn in {TRIES} tries")
    assert get_tokenizer().eos_token_id not in t.response_ids[: t.segments[-2].end]
    # agentroll pauses the engine itself for abort; for wait it holds new calls back.
    assert seen["engine_paused"] == (mode != "wait") and not seen["engine_paused_after"]
    assert seen["sampled_while_paused"] == 0
    assert t.num_turns == 2
    assert await sampled_mismatches(vllm_engine.url, t) == []
    old = seen["version"]
    versions = [(s.policy_version - old, s.finish_reason) for s in t.segments]
    first_turn = sum(s.end - s.start for s in t.segments[:-1])
    assert first_turn == LONG_TURN
    if mode == "abort":
        # The partial turn stays (old version); it goes on from there after resume (new one).
        assert versions == [(0, "abort"), (1, "length"), (1, "length")], versions
        assert t.segments[1].start == t.segments[0].end  # one turn, two segments
    else:
        # The turn in flight finished under the old weights before the pause returned.
        assert seen["in_flight"] == 0
        assert versions == [(0, "length"), (1, "length")], versions
