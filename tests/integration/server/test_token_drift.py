"""Re-tokenization drift is real with the scripted backend's BPE tokenizer, and avoided."""

from typing import Any, ClassVar

import httpx
import pytest
from tests.conftest import ServerFactory

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.server.schema import Outcome
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig, get_chat_template, get_tokenizer
from agentroll.testing.scripted_llm import create_app as create_scripted_app

pytestmark = pytest.mark.integration

TURNS = 20
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]


class ToolTurns(AgentHandler):
    """Twenty turns, each answering a tool result followed by the next request."""

    name: ClassVar[str] = "tool-turns"

    async def run(self, ctx: RolloutContext) -> None:
        system = {"role": "system", "content": "Use the tools; repeat what you are asked to."}
        await ctx.llm.start([system, {"role": "user", "content": "Repeat after me: start"}], TOOLS)
        await ctx.llm.generate()
        for k in range(1, TURNS):
            await ctx.llm.add_messages(
                [
                    {"role": "tool", "content": f"lookup result {k}: definitely-{k * 7}"},
                    {"role": "user", "content": f"Repeat after me: phrase number {k}, done."},
                ]
            )
            await ctx.llm.generate()

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0)


async def test_twenty_tool_turns_are_exact_and_the_naive_way_drifts(
    agentroll_server: ServerFactory,
) -> None:
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=11)))
    registry = HandlerRegistry()
    registry.register(ToolTurns)
    try:
        async with agentroll_server(registry=registry) as (_, client):
            await client.add_backend({"id": "b", "base_url": backend.url})
            await client.submit([{"job_id": "d", "handler": "tool-turns", "instance": {}}])
            t = (await client.wait_for(["d"], 60))["d"]
        async with httpx.AsyncClient(base_url=backend.url) as http:
            log: list[dict[str, Any]] = (await http.get("/scripted/requests")).json()["requests"]
    finally:
        await backend.stop()
    assert t.outcome is Outcome.ok and t.num_turns == TURNS == len(log)
    sampled = [tok for tok, mask in zip(t.response_ids, t.response_mask, strict=True) if mask]
    returned = [tok for call in log for tok in call["token_ids"]]
    assert sampled == returned  # byte for byte, across all 20 turns

    # The naive way: decode each reply, re-render the whole conversation, re-encode it.
    tokenizer, template = get_tokenizer(), get_chat_template()
    naive_ids = template.encode(t.messages, TOOLS, add_generation_prompt=False)
    exact_ids = t.prompt_ids + t.response_ids
    assert naive_ids[: len(exact_ids)] != exact_ids
    drifted_turns = sum(
        tokenizer.encode(tokenizer.decode(call["token_ids"])) != call["token_ids"] for call in log
    )
    assert drifted_turns > 0  # the hazard is real on this tokenizer, not a constructed mismatch
    # ... while the text is the same: only the token path differs.
    assert (
        tokenizer.decode(exact_ids)
        == template.render(t.messages, TOOLS)[: len(tokenizer.decode(exact_ids))]
    )
