"""`math`: the model reasons and gives a final answer; reward 1 if it equals the reference.

Task instance: `{"question": str, "answer": str}` (LaTeX allowed in the answer; other fields
such as `id` are kept but unused), optionally `"agent": {...}` (see below).

- Without `agent` (the default): no sandbox; the model boxes its answer (`\\boxed{}`); if a
  reply has none, the handler asks once more (within `max_turns`).
- With `agent` (e.g. `"agent": {}` or `{"max_turns": 8}`, any `AgentConfig` field): a
  sandbox with a persistent `python` tool; the model computes and calls
  `submit(answer="...")` (a `\\boxed{}` answer in its last reply counts too).

Reward: 1 if math-verify judges the answer equal to the reference (see `answers`: it runs
in a worker process with a hard timeout and a memory limit; the same plain number on both
sides is accepted without it); `reward_info = {"predicted", "gold", "reason"}`, `reason`
one of `equal`, `not_equal`, `unparsable_answer`, `answer_too_long` (over
`MAX_ANSWER_CHARS`, not parsed; `predicted` is then cut to that length), `grading_timeout`
and `grading_crashed` (the answer overran the grader: reward 0). A gold answer math-verify
cannot parse, or a grader that cannot run, is `infra_error`.
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import (
    ANSWER_TOOLS,
    FinalAnswer,
    ToolAgentHandler,
    no_answer,
)
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.builtin.math.answers import MAX_ANSWER_CHARS, answers_match, extract_boxed
from agentroll.handlers.context import Reward, RolloutContext

SYSTEM_PROMPT = (
    "You are a careful mathematician. Reason step by step, then give the final answer in \\boxed{}."
)
TOOL_SYSTEM_PROMPT = (
    "You are a careful mathematician. Use the python tool to compute and check your work, "
    "then call submit with the final answer (LaTeX allowed, e.g. \\frac{3}{4})."
)
FOLLOW_UP = "Please put your final answer in \\boxed{}."


class MathInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(..., min_length=1, max_length=100_000)
    answer: str = Field(..., min_length=1, max_length=10_000)
    agent: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class MathTask:
    id: str
    question: str
    answer: str
    solution: str
    """A worked reference solution (never shown to the policy; scripted backends use it)."""
    python: str = ""
    """Python code that computes the answer (scripted tool-using policies run it)."""

    def instance(self, *, tools: bool = False) -> dict[str, Any]:
        """The job instance a trainer would submit for this task."""
        out: dict[str, Any] = {"id": self.id, "question": self.question, "answer": self.answer}
        if tools:
            out["agent"] = {}
        return out


@cache
def load_math_tasks() -> tuple[MathTask, ...]:
    """The bundled task set (`data/math_tasks.jsonl`), read once per process."""
    data = resources.files("agentroll.handlers.builtin.math").joinpath("data/math_tasks.jsonl")
    lines = data.read_text(encoding="utf-8").splitlines()
    return tuple(MathTask(**json.loads(line)) for line in lines if line.strip())


def boxed_answer(ctx: RolloutContext, text: str, submitted: bool) -> str | None:
    """The last `\\boxed{}` of a reply; a submitted answer may also be given bare."""
    boxed = extract_boxed(text)
    if boxed is not None or not submitted:
        return boxed
    return text.strip().strip("$").strip() or None


class MathHandler(ToolAgentHandler):
    name = "math"
    instance_model = MathInstance
    system_prompt = TOOL_SYSTEM_PROMPT
    default_tools = ANSWER_TOOLS
    final_answer: ClassVar[FinalAnswer] = FinalAnswer(
        boxed_answer,
        plain_system_prompt=SYSTEM_PROMPT,
        follow_up=FOLLOW_UP,
        description="The final answer, as a number or LaTeX expression.",
    )

    def task_prompt(self, ctx: RolloutContext) -> str:
        return str(ctx.instance["question"])

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        predicted = self.final_answer.given(ctx, result)
        if predicted is None:
            return no_answer()
        gold = str(ctx.instance["answer"])
        grade = await answers_match(gold, predicted)
        info = {"predicted": predicted[:MAX_ANSWER_CHARS], "gold": gold, "reason": grade.reason}
        return Reward(1.0 if grade.equal else 0.0, info)
