"""`FinalAnswer`: how a task scored on one final answer asks for it and reads it.

A task (`ToolAgentHandler`) that sets `final_answer` (math, multiple choice, free text scored
by a judge or a remote verifier) runs by default under one of two agents, chosen per job:

- `answer` (default): no sandbox, no tools; the model answers in text and, if `read` finds
  no answer in its reply, is asked once more with `follow_up` (within `max_turns`);
- `tool_loop`: when the instance carries an `"agent"` object (even `{}`): a sandbox, the
  loop's tools, and `submit(answer=...)`; an answer written in the final text counts too.

Under any other agent (a harness) the answer is read the same way from its `AgentResult`
(`given`). The task's `grade` scores what `given` returns.
"""

from collections.abc import Callable
from dataclasses import dataclass

from agentroll.handlers.agent.tools import SubmitTool
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.context import Reward, RolloutContext

AnswerReader = Callable[[RolloutContext, str, bool], str | None]
"""`(ctx, text, submitted)`: the answer in a reply, or in `submit`'s `answer` argument when
`submitted`; None if it holds none."""

ANSWER_TOOLS = ("python", "submit")
"""An answer task's tools under the tool loop: compute, then submit the answer."""
SUBMIT_ANSWER_PROMPT = (
    "You are a helpful assistant. Use the tools as you need, then call submit with your "
    "final answer."
)
"""The tool loop's system prompt for a free-text answer."""


def whole_reply(ctx: RolloutContext, text: str, submitted: bool) -> str | None:
    """Free text: the whole reply (or `submit`'s `answer`), stripped; None if empty."""
    return text.strip() or None


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    read: AnswerReader = whole_reply
    plain_system_prompt: str = "You are a helpful assistant. Answer the request."
    """The system prompt under the `answer` agent (no tools)."""
    follow_up: str | None = "Please give your final answer."
    """What the `answer` agent asks once more when `read` finds no answer in the reply."""
    description: str = "Your final answer."
    """What `submit`'s `answer` argument holds."""

    def submit_tool(self) -> SubmitTool:
        return SubmitTool(
            "Submit your final answer and end the task.",
            {"answer": {"type": "string", "description": self.description}},
            ["answer"],
        )

    def given(self, ctx: RolloutContext, result: AgentResult) -> str | None:
        """The answer an agent left: `submit`'s `answer` if it submitted, else its last
        reply's; None if `read` finds none."""
        if result.submission is not None:
            return self.read(ctx, str(result.submission.get("answer", "")), True)
        return self.read(ctx, result.final_text, False)


def no_answer() -> Reward:
    """The reward of an agent that left no answer to score."""
    return Reward(0.0, {"predicted": None, "reason": "no answer"})
