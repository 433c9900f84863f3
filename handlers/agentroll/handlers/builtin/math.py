"""`math`: the model reasons and boxes a final answer; reward 1 if it equals the reference.

Task instance: `{"question": str, "answer": str}` (LaTeX allowed in the answer; other
fields such as `id` are kept but unused). Multi-turn: if a reply has no `\\boxed{}` answer,
the handler asks once more (within `max_turns`).
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.base import AgentHandler
from agentroll.handlers.builtin.answers import answers_match, extract_boxed
from agentroll.handlers.context import Reward, RolloutContext

SYSTEM_PROMPT = (
    "You are a careful mathematician. Reason step by step, then give the final answer in \\boxed{}."
)
FOLLOW_UP = "Please put your final answer in \\boxed{}."
MAX_FOLLOW_UPS = 1


class MathInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(..., min_length=1, max_length=100_000)
    answer: str = Field(..., min_length=1, max_length=10_000)


@dataclass(frozen=True, slots=True)
class MathTask:
    id: str
    question: str
    answer: str
    solution: str
    """A worked reference solution (never shown to the policy; scripted backends use it)."""

    def instance(self) -> dict[str, str]:
        """The job instance a trainer would submit for this task."""
        return {"id": self.id, "question": self.question, "answer": self.answer}


@cache
def load_math_tasks() -> tuple[MathTask, ...]:
    """The bundled task set (`data/math_tasks.jsonl`), read once per process."""
    data = resources.files("agentroll.handlers.builtin").joinpath("data/math_tasks.jsonl")
    lines = data.read_text(encoding="utf-8").splitlines()
    return tuple(MathTask(**json.loads(line)) for line in lines if line.strip())


class MathHandler(AgentHandler):
    name = "math"
    instance_model = MathInstance

    async def run(self, ctx: RolloutContext) -> None:
        question = str(ctx.instance["question"])
        await ctx.llm.start(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        )
        turn = await ctx.llm.generate()
        follow_ups = 0
        while (
            extract_boxed(turn.text) is None
            and turn.finish_reason != "length"
            and follow_ups < MAX_FOLLOW_UPS
            and ctx.llm.num_turns < ctx.limits.max_turns
        ):
            follow_ups += 1
            await ctx.llm.add_messages([{"role": "user", "content": FOLLOW_UP}])
            turn = await ctx.llm.generate()
        ctx.state["final_text"] = turn.text

    async def eval(self, ctx: RolloutContext) -> Reward:
        gold = str(ctx.instance["answer"])
        predicted = extract_boxed(ctx.state.get("final_text", ""))
        if predicted is None:
            return Reward(0.0, {"predicted": None, "reason": "no boxed answer"})
        correct = await answers_match(gold, predicted)
        return Reward(1.0 if correct else 0.0, {"predicted": predicted, "gold": gold})
