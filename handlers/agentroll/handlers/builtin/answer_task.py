"""`AnswerTaskHandler`: tasks scored on one final answer (math, multiple choice, free text
scored by a judge or a remote verifier: `FreeTextAnswerHandler`).

Two ways to run, chosen per job:
- plain (default): no sandbox, no tools; the model answers in text and, if it gave no
  answer, is asked once more (within `max_turns`);
- tools: when the instance carries an `"agent"` object (even `{}`), a sandbox is started and
  the model works through the agent loop (by default with a `python` tool) and calls
  `submit(answer=...)`; an answer written in the final text counts too.
"""

from typing import Any, ClassVar

from agentroll.handlers.agent import STATE_KEY, SubmitTool, ToolAgentHandler
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.server.schema.messages import ChatMessage

MAX_FOLLOW_UPS = 1


class AnswerTaskHandler(ToolAgentHandler):
    plain_system_prompt: ClassVar[str]
    follow_up: ClassVar[str]
    answer_description: ClassVar[str] = "Your final answer."
    default_tools = ("python", "submit")

    # -- provided by the task family -------------------------------------------------------
    def extract(self, ctx: RolloutContext, text: str, *, submitted: bool = False) -> str | None:
        """The answer in a reply (or in `submit`'s `answer` argument when `submitted`)."""
        raise NotImplementedError

    async def score(self, ctx: RolloutContext, predicted: str) -> Reward:
        raise NotImplementedError

    # -- the two paths ----------------------------------------------------------------------
    @staticmethod
    def uses_tools(ctx: RolloutContext) -> bool:
        return ctx.instance.get("agent") is not None

    def submit_tool(self, ctx: RolloutContext) -> SubmitTool:
        return SubmitTool(
            "Submit your final answer and end the task.",
            {"answer": {"type": "string", "description": self.answer_description}},
            ["answer"],
        )

    async def init(self, ctx: RolloutContext) -> None:
        if self.uses_tools(ctx):
            await super().init(ctx)

    def plain_messages(self, ctx: RolloutContext) -> list[ChatMessage]:
        """The first prompt of the plain path."""
        return [
            {"role": "system", "content": self.plain_system_prompt},
            {"role": "user", "content": self.task_prompt(ctx)},
        ]

    async def run(self, ctx: RolloutContext) -> None:
        if self.uses_tools(ctx):
            await super().run(ctx)
            return
        await ctx.llm.start(self.plain_messages(ctx))
        turn = await ctx.llm.generate()
        follow_ups = 0
        while (
            self.extract(ctx, turn.text) is None
            and turn.finish_reason != "length"
            and follow_ups < MAX_FOLLOW_UPS
            and ctx.llm.num_turns < ctx.limits.max_turns
        ):
            follow_ups += 1
            await ctx.llm.add_messages([{"role": "user", "content": self.follow_up}])
            turn = await ctx.llm.generate()
        ctx.state["final_text"] = turn.text

    def predicted(self, ctx: RolloutContext) -> str | None:
        if STATE_KEY not in ctx.state:
            return self.extract(ctx, ctx.state.get("final_text", ""))
        run = self.agent_run(ctx)
        if run.submission is not None:
            return self.extract(ctx, str(run.submission.get("answer", "")), submitted=True)
        return self.extract(ctx, run.final_text)

    async def eval(self, ctx: RolloutContext) -> Reward:
        predicted = self.predicted(ctx)
        if predicted is None:
            return Reward(0.0, {"predicted": None, "reason": "no answer"})
        return await self.score(ctx, predicted)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        return super().final_result(ctx) if self.uses_tools(ctx) else {}


class FreeTextAnswerHandler(AnswerTaskHandler):
    """Tasks whose answer is free text, scored outside the handler (a judge, a remote
    verifier): the whole final reply, or `submit`'s `answer`, is the answer."""

    plain_system_prompt = "You are a helpful assistant. Answer the request."
    system_prompt = (
        "You are a helpful assistant. Use the tools as you need, then call submit with your "
        "final answer."
    )
    follow_up = "Please give your final answer."

    def extract(self, ctx: RolloutContext, text: str, *, submitted: bool = False) -> str | None:
        return text.strip() or None
