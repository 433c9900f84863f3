"""Handlers whose turns do not need the model to call tools: a random-weight model rarely
does. Each RUN turn is one generation; between turns the handler adds the next user message."""

from typing import ClassVar

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext

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


class ChatTurns(AgentHandler):
    """`instance.turns` user turns (default 3), with `lookup` offered; `instance.max_tokens`,
    if given, is each turn's own limit. Reward: the share of turns whose reply has any text,
    so an honest model earns it on every turn."""

    name: ClassVar[str] = "chat-turns"

    async def run(self, ctx: RolloutContext) -> None:
        turns = int(ctx.instance.get("turns", 3))
        limits: list[int | None] = list(ctx.instance.get("max_tokens", [None] * turns))
        system = {"role": "system", "content": "Answer briefly; use the tools if you need to."}
        await ctx.llm.start([system, {"role": "user", "content": "Say something: 0"}], TOOLS)
        replies = [await ctx.llm.generate(max_tokens=limits[0])]
        for k in range(1, turns):
            await ctx.llm.add_messages([{"role": "user", "content": f"Say something: {k}"}])
            replies.append(await ctx.llm.generate(max_tokens=limits[k]))
        ctx.state["texts"] = [r.text for r in replies]

    async def eval(self, ctx: RolloutContext) -> Reward:
        texts: list[str] = ctx.state.get("texts", [])
        return Reward(sum(bool(t) for t in texts) / max(len(texts), 1))


def chat_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register(ChatTurns)
    return registry
