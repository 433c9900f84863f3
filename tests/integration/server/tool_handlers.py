"""A tool-using handler for the export and NeMo Gym tests: the scripted model runs `python`,
reads its output, then `submit`s. The tool answers in-process (those tests are about the
formats, not sandboxes)."""

import asyncio
from typing import ClassVar

from agentroll.handlers import AgentHandler, InfraError, Reward, RolloutContext
from agentroll.handlers.toolcalls import assistant_message, get_parser, tool_message

QUESTION = "What is the sum of the first 20 positive integers?"  # a bundled math task
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
            },
        },
    }
    for name, arg in (("python", "code"), ("submit", "answer"))
]


class ToolMath(AgentHandler):
    """Two tool turns; the instance may set `question`, `expected_answer`, `sleep_s` (before
    the first turn) and `infra` (the rollout then fails as the infrastructure's fault)."""

    name: ClassVar[str] = "tool-math"

    async def run(self, ctx: RolloutContext) -> None:
        if ctx.instance.get("infra"):
            raise InfraError("sandbox vanished", cause="sandbox_lost")
        await asyncio.sleep(float(ctx.instance.get("sleep_s", 0.0)))
        parser = get_parser("hermes")
        system = {"role": "system", "content": "Solve it with the tools."}
        question = str(ctx.instance.get("question", QUESTION))
        await ctx.llm.start([system, {"role": "user", "content": question}], tools=TOOLS)
        for turn_number in (1, 2):
            turn = await ctx.llm.generate()
            reply = parser.parse(turn.text).with_call_ids(f"call_{turn_number}_")
            ctx.llm.describe_last_reply(assistant_message(reply))
            if not reply.calls or reply.calls[0].name == "submit":
                ctx.state["answer"] = reply.calls[0].arguments if reply.calls else {}
                return
            await ctx.llm.add_messages([tool_message(c, "210\n") for c in reply.calls])

    async def eval(self, ctx: RolloutContext) -> Reward:
        expected = str(ctx.instance.get("expected_answer", "210"))
        return Reward(float(ctx.state.get("answer", {}).get("answer") == expected))
