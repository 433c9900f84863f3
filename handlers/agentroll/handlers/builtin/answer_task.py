"""`AnswerTaskHandler`: tasks scored on one final answer (math, multiple choice, free text
scored by a judge or a remote verifier: `FreeTextAnswerHandler`).

Two default agents, chosen per job:
- `answer` (default): no sandbox, no tools; the model answers in text and, if it gave no
  answer, is asked once more (within `max_turns`);
- `tool_loop`: when the instance carries an `"agent"` object (even `{}`), a sandbox is
  started and the model works through the agent loop (by default with a `python` tool) and
  calls `submit(answer=...)`; an answer written in the final text counts too.

Under any other agent (a harness) the answer is read the same way from its `AgentResult`.
"""

from typing import ClassVar

from agentroll.handlers.agent import SubmitTool, ToolAgentHandler
from agentroll.handlers.agent.answer import AnswerAgent
from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.server.schema.messages import ChatMessage


class AnswerTaskHandler(ToolAgentHandler):
    plain_system_prompt: ClassVar[str]
    answer_description: ClassVar[str] = "Your final answer."
    default_tools = ("python", "submit")
    grades_without_sandbox = True

    # -- provided by the task family -------------------------------------------------------
    def extract(self, ctx: RolloutContext, text: str, *, submitted: bool = False) -> str | None:
        """The answer in a reply (or in `submit`'s `answer` argument when `submitted`)."""
        raise NotImplementedError

    async def score(self, ctx: RolloutContext, predicted: str) -> Reward:
        raise NotImplementedError

    # -- the two default agents ---------------------------------------------------------------
    def default_agent(self, ctx: RolloutContext) -> Agent:
        if ctx.instance.get("agent") is None:
            return AnswerAgent()
        return super().default_agent(ctx)

    def submit_tool(self, ctx: RolloutContext) -> SubmitTool:
        return SubmitTool(
            "Submit your final answer and end the task.",
            {"answer": {"type": "string", "description": self.answer_description}},
            ["answer"],
        )

    def plain_messages(self, ctx: RolloutContext) -> list[ChatMessage]:
        return [
            {"role": "system", "content": self.plain_system_prompt},
            {"role": "user", "content": self.task_prompt(ctx)},
        ]

    def has_answer(self, ctx: RolloutContext, text: str) -> bool:
        return self.extract(ctx, text) is not None

    def predicted(self, ctx: RolloutContext, result: AgentResult) -> str | None:
        if result.submission is not None:
            return self.extract(ctx, str(result.submission.get("answer", "")), submitted=True)
        return self.extract(ctx, result.final_text)

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        predicted = self.predicted(ctx, result)
        if predicted is None:
            return Reward(0.0, {"predicted": None, "reason": "no answer"})
        return await self.score(ctx, predicted)


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
