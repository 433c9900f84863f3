"""The trajectory invariants (docs/design.md, invariants 1-4), checked against what the
scripted vLLM backend really returned."""

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from tests.conftest import ServerFactory

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.server.schema import Outcome, Trajectory
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig, get_chat_template, get_tokenizer
from agentroll.testing.scripted_llm import create_app as create_scripted_app

pytestmark = pytest.mark.integration

WORDS = ["alpha", "bravo charlie", "delta: 42", "echo foxtrot golf", "hotel"]


class Parrot(AgentHandler):
    """A multi-turn conversation: each user turn asks the model to repeat a phrase."""

    name: ClassVar[str] = "parrot"

    async def run(self, ctx: RolloutContext) -> None:
        words = list(ctx.instance["words"])
        system = {"role": "system", "content": "You repeat exactly what you are asked to."}
        await ctx.llm.start([system, {"role": "user", "content": f"Repeat after me: {words[0]}"}])
        await ctx.llm.generate()
        for word in words[1:]:
            await ctx.llm.add_messages([{"role": "user", "content": f"Repeat after me: {word}"}])
            await ctx.llm.generate()

    async def eval(self, ctx: RolloutContext) -> Reward:
        replies = [m["content"] for m in ctx.llm.messages if m["role"] == "assistant"]
        return Reward(float(replies == list(ctx.instance["words"])))


@pytest.fixture
async def backend() -> AsyncIterator[RunningServer]:
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=3)))
    yield server
    await server.stop()


async def _rollout(
    agentroll_server: ServerFactory, backend: RunningServer, job: dict[str, Any]
) -> tuple[Trajectory, list[dict[str, Any]]]:
    registry = HandlerRegistry()
    registry.register(Parrot)
    async with agentroll_server(registry=registry) as (_, client):
        await client.add_backend({"id": "b0", "base_url": backend.url})
        await client.submit([job])
        done = await client.wait_for([job["job_id"]], 30)
    async with httpx.AsyncClient(base_url=backend.url) as http:
        log = (await http.get("/scripted/requests")).json()["requests"]
    return done[job["job_id"]], log


async def test_multi_turn_tokens_are_exactly_what_the_backend_sampled(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    job = {"job_id": "p1", "handler": "parrot", "instance": {"words": WORDS}}
    t, log = await _rollout(agentroll_server, backend, job)
    assert t.outcome is Outcome.ok and t.reward == 1.0
    assert t.num_turns == len(WORDS) == len(log)
    # Invariant 2.
    assert len(t.response_ids) == len(t.response_mask) == len(t.response_logprobs)
    canonical_drift = 0
    for k, (seg, call) in enumerate(zip(t.segments, log, strict=True)):
        sampled = t.response_ids[seg.start : seg.end]
        # Invariant 1: masked-in ids are exactly the backend's, in order, with its logprobs.
        assert sampled == call["token_ids"]
        assert t.response_mask[seg.start : seg.end] == [1] * len(sampled)
        assert t.response_logprobs[seg.start : seg.end] == call["logprobs"]
        # Invariant 3: turn k's prompt is prompt_ids + everything recorded before it.
        assert call["prompt_token_ids"] == t.prompt_ids + t.response_ids[: seg.start]
        if k:
            between = range(t.segments[k - 1].end, seg.start)
            assert between and all(t.response_mask[i] == 0 for i in between)
            assert all(t.response_logprobs[i] == 0.0 for i in between)
        # The hazard is real: re-encoding the decoded text does not give the sampled ids.
        tokenizer = get_tokenizer()
        canonical_drift += tokenizer.encode(tokenizer.decode(sampled)) != sampled
    assert canonical_drift > 0
    assert {s.policy_version for s in t.segments} == {0} and t.policy_versions == [0]


async def test_observation_glue_matches_the_chat_template(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    """Decoded, the recorded tokens are the canonical rendering of the same conversation:
    the closing tokens of each model turn appear exactly once."""
    job = {"job_id": "p2", "handler": "parrot", "instance": {"words": WORDS[:3]}}
    t, _ = await _rollout(agentroll_server, backend, job)
    text = get_tokenizer().decode(t.prompt_ids + t.response_ids)
    rendered = get_chat_template().render(t.messages, add_generation_prompt=False)
    assert rendered.startswith(text)
    assert rendered[len(text) :] == "\n"  # only the glue after the final <|im_end|>


async def test_context_overflow_ends_with_length_and_agent_error(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    job = {
        "job_id": "p3",
        "handler": "parrot",
        "instance": {"words": WORDS * 4},
        "limits": {"max_context_tokens": 120},
    }
    t, log = await _rollout(agentroll_server, backend, job)
    assert t.outcome is Outcome.agent_error and t.finish_reason == "length"
    assert t.error is not None and t.error.type == "context_overflow"
    assert t.reward == 0.0  # still scored: the policy ran out of room
    assert all(len(c["prompt_token_ids"]) < 120 for c in log)  # never sent an oversized request
    assert len(t.prompt_ids) + len(t.response_ids) <= 120  # the trajectory fits the context


async def test_no_backend_is_infra_error_not_zero(agentroll_server: ServerFactory) -> None:
    registry = HandlerRegistry()
    registry.register(Parrot)
    async with agentroll_server(registry=registry, backend_wait_s=0) as (_, client):
        await client.submit([{"job_id": "p4", "handler": "parrot", "instance": {"words": ["a"]}}])
        t = (await client.wait_for(["p4"], 10))["p4"]
    assert (t.outcome, t.reward) == (Outcome.infra_error, None)
    assert t.error is not None and t.error.type == "no_backend"


async def test_jobs_submitted_before_any_backend_wait_for_one(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    registry = HandlerRegistry()
    registry.register(Parrot)
    async with agentroll_server(registry=registry, backend_wait_s=30) as (_, client):
        await client.submit([{"job_id": "p6", "handler": "parrot", "instance": {"words": ["a"]}}])
        assert await client.result("p6", wait=0.3) is None  # waiting, not failed
        await client.add_backend({"id": "late", "base_url": backend.url})
        t = (await client.wait_for(["p6"], 30))["p6"]
    assert t.outcome is Outcome.ok and t.segments[0].backend_id == "late"


async def test_dead_backend_is_retried_elsewhere_and_recorded(
    agentroll_server: ServerFactory, backend: RunningServer
) -> None:
    registry = HandlerRegistry()
    registry.register(Parrot)
    async with agentroll_server(registry=registry) as (_, client):
        # A registered backend that refuses connections (nothing listens on port 9 here).
        await client.add_backend(
            {"id": "dead", "base_url": "http://127.0.0.1:9", "max_concurrency": 100_000}
        )
        await client.add_backend({"id": "live", "base_url": backend.url, "max_concurrency": 1})
        await client.submit(
            [{"job_id": "p5", "handler": "parrot", "instance": {"words": WORDS[:2]}}]
        )
        t = (await client.wait_for(["p5"], 30))["p5"]
    assert t.outcome is Outcome.ok and t.reward == 1.0
    assert {s.backend_id for s in t.segments} == {"live"}
    assert any(r["backend"] == "dead" for r in t.metadata["llm_retries"])


@pytest.mark.parametrize(("template", "diverges"), [("chatml", False), ("qwen3", True)])
async def test_think_dropping_template_stays_exact_and_divergence_is_counted(
    agentroll_server: ServerFactory, template: str, diverges: bool
) -> None:
    config = ScriptedLLMConfig(seed=3, thinking=True, chat_template=template)  # type: ignore[arg-type]
    thinker = await start_in_loop(create_scripted_app(config))
    try:
        job = {"job_id": "t", "handler": "parrot", "instance": {"words": WORDS}}
        t, log = await _rollout(agentroll_server, thinker, job)
    finally:
        await thinker.stop()
    assert t.outcome is Outcome.ok and t.num_turns == len(WORDS)
    for seg, call in zip(t.segments, log, strict=True):  # invariants 1 and 3 hold regardless
        assert t.response_ids[seg.start : seg.end] == call["token_ids"]
        assert call["prompt_token_ids"] == t.prompt_ids + t.response_ids[: seg.start]
    assert all("<think>" in m["content"] for m in t.messages if m["role"] == "assistant")
    # A trainer re-rendering this chat with the qwen3 template would rewrite 4 earlier turns.
    assert t.metadata["template_divergence"] == (len(WORDS) - 1 if diverges else 0)
