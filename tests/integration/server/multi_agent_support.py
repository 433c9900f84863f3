"""Two-agent handlers and checks shared by the multi-agent tests and benchmark."""

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx
from tests.integration.server.test_trajectory import Parrot

from agentroll.handlers import AgentHandler, HandlerRegistry, LLMSession, Reward, RolloutContext
from agentroll.server.schema import AgentTrace, Trajectory
from agentroll.trainer_clients import AsyncRolloutClient


async def parrot(llm: LLMSession, words: Sequence[str]) -> None:
    """A multi-turn conversation: each user turn asks the model to repeat a phrase."""
    system = {"role": "system", "content": "You repeat exactly what you are asked to."}
    await llm.start([system, {"role": "user", "content": f"Repeat after me: {words[0]}"}])
    await llm.generate()
    for word in words[1:]:
        await llm.add_messages([{"role": "user", "content": f"Repeat after me: {word}"}])
        await llm.generate()


def repeated(llm: LLMSession) -> list[str]:
    return [m["content"] for m in llm.messages if m["role"] == "assistant"]


class Duet(AgentHandler):
    """Two agents, each in its own conversation, talking at the same time; instance:
    `{"speaker": [phrases], "listener": [phrases]}`. Each agent is rewarded for repeating
    its phrases; the episode for both doing so."""

    name: ClassVar[str] = "duet"
    agent_names: ClassVar[tuple[str, ...]] = ("speaker", "listener")

    async def run(self, ctx: RolloutContext) -> None:
        await asyncio.gather(
            *(parrot(ctx.agents[name].llm, ctx.instance[name]) for name in self.agent_names)
        )

    async def eval(self, ctx: RolloutContext) -> Reward:
        rewards = {
            name: float(repeated(ctx.agents[name].llm) == list(ctx.instance[name]))
            for name in self.agent_names
        }
        return Reward(min(rewards.values()), agents=rewards)


class Ghost(AgentHandler):
    """Drives `speaker`, but asks for an agent it never declared (`instance["agent"]`)."""

    name: ClassVar[str] = "ghost"
    agent_names: ClassVar[tuple[str, ...]] = ("speaker",)

    async def run(self, ctx: RolloutContext) -> None:
        await parrot(ctx.agents[ctx.instance["agent"]].llm, ["boo"])

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0)


class Stray(Ghost):
    """A single-agent handler that asks for an agent all the same."""

    name: ClassVar[str] = "stray"
    agent_names: ClassVar[tuple[str, ...]] = ()


class Misrewarded(Duet):
    """Rewards an agent its job does not have: a handler bug."""

    name: ClassVar[str] = "misrewarded"

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0, agents={"speaker": 1.0, "narrator": 0.5})


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    for cls in (Duet, Ghost, Stray, Misrewarded, Parrot):
        r.register(cls)
    return r


def duet_job(job_id: str, speaker: Sequence[str], listener: Sequence[str], **extra: Any) -> dict:
    return {
        "job_id": job_id,
        "handler": "duet",
        "instance": {"speaker": list(speaker), "listener": list(listener)},
        "agents": {
            "speaker": {"policy": "alpha"},
            "listener": {"policy": "beta", "trainable": False},
        },
        **extra,
    }


async def serve_policies(client: AsyncRolloutClient, alpha_url: str, beta_url: str) -> None:
    """Register one backend for policy `alpha` (id a0) and one for `beta` (id b0)."""
    await client.add_backend({"id": "a0", "base_url": alpha_url, "policy": "alpha"})
    await client.add_backend({"id": "b0", "base_url": beta_url, "policy": "beta"})


async def backend_log(url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as http:
        return list((await http.get("/scripted/requests")).json()["requests"])


def agent(t: Trajectory, name: str) -> AgentTrace:
    assert t.agents is not None, "a multi-agent job's trajectory lists its agents"
    return next(a for a in t.agents if a.name == name)


def assert_trace_exact(trace: AgentTrace, log: list[dict[str, Any]]) -> None:
    """Invariants 1-3 for one agent's trace against its policy's backend's own record of every
    call (turns not split by a pause: one segment per call)."""
    by_prompt = {tuple(c["prompt_token_ids"]): c for c in log}
    n = len(trace.response_ids)
    assert len(trace.response_mask) == len(trace.response_logprobs) == n  # invariant 2
    for k, seg in enumerate(trace.segments):
        # invariant 3: the call's prompt is prompt_ids + everything recorded before it
        call = by_prompt[tuple(trace.prompt_ids + trace.response_ids[: seg.start])]
        # invariant 1: the sampled ids and their logprobs, verbatim
        assert trace.response_ids[seg.start : seg.end] == call["token_ids"]
        assert trace.response_logprobs[seg.start : seg.end] == call["logprobs"]
        assert trace.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
        if k:
            between = range(trace.segments[k - 1].end, seg.start)
            assert between and not any(trace.response_mask[i] for i in between)
