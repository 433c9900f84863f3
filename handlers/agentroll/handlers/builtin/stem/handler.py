"""`stem`: multiple-choice science questions; reward 1 for the right letter.

Task instance: `{"question": str, "choices": [str, ...] | {"A": str, ...}, "answer": "C"}`
(2 to 26 choices; a list is lettered A, B, C, ...), optionally `"agent": {...}` to work with
a `python` tool in a sandbox and `submit(answer="C")` (see `FinalAnswer`).

The answer is read robustly (`\\boxed{C}`, "Answer: C", "(C)", a bare "C"; see `choices`);
`reward_info = {"predicted", "gold"}`.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentroll.handlers.agent import (
    ANSWER_TOOLS,
    FinalAnswer,
    ToolAgentHandler,
    no_answer,
)
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.builtin.stem.choices import choice_letters, extract_choice
from agentroll.handlers.context import Reward, RolloutContext

SYSTEM_PROMPT = (
    "You are an expert in science and engineering. Think the question through, then give the "
    "letter of the correct choice as \\boxed{X}."
)
TOOL_SYSTEM_PROMPT = (
    "You are an expert in science and engineering. You may use the python tool for "
    "calculations; call submit with the letter of the correct choice."
)
FOLLOW_UP = "Please give only the letter of your final choice, as \\boxed{X}."


class StemInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(..., min_length=1, max_length=100_000)
    choices: list[str] | dict[str, str]
    answer: str = Field(..., pattern=r"^[A-Z]$")
    agent: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _answer_is_a_choice(self) -> "StemInstance":
        letters = lettered(self.choices)
        if self.answer not in letters:
            raise ValueError(f"answer {self.answer!r} is not one of the choices {list(letters)}")
        return self


def lettered(choices: list[str] | Mapping[str, str]) -> dict[str, str]:
    """Choices keyed by letter (a list is lettered A, B, ...)."""
    if isinstance(choices, Mapping):
        letters = choice_letters(len(choices))
        if sorted(choices) != list(letters):
            raise ValueError(f"choice keys must be {list(letters)}, not {sorted(choices)}")
        return {k: str(choices[k]) for k in letters}
    return dict(zip(choice_letters(len(choices)), map(str, choices), strict=True))


@dataclass(frozen=True, slots=True)
class StemTask:
    id: str
    question: str
    choices: tuple[str, ...]
    answer: str
    explanation: str
    """Why the answer is right (never shown to the policy; scripted backends use it)."""

    def instance(self, *, tools: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "choices": list(self.choices),
            "answer": self.answer,
        }
        if tools:
            out["agent"] = {}
        return out


@cache
def load_stem_tasks() -> tuple[StemTask, ...]:
    """The bundled question set (`data/stem_tasks.jsonl`)."""
    data = resources.files("agentroll.handlers.builtin.stem").joinpath("data/stem_tasks.jsonl")
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines() if line.strip()]
    return tuple(StemTask(**{**row, "choices": tuple(row["choices"])}) for row in rows)


def render_question(question: str, choices: list[str] | Mapping[str, str]) -> str:
    options = "\n".join(f"({k}) {v}" for k, v in lettered(choices).items())
    return f"{question}\n\n{options}"


def chosen_letter(ctx: RolloutContext, text: str, submitted: bool) -> str | None:
    """The letter a reply (or a submitted answer) chooses among the task's choices."""
    return extract_choice(text, "".join(lettered(ctx.instance["choices"])))


class StemHandler(ToolAgentHandler):
    name = "stem"
    instance_model = StemInstance
    system_prompt = TOOL_SYSTEM_PROMPT
    default_tools = ANSWER_TOOLS
    final_answer: ClassVar[FinalAnswer] = FinalAnswer(
        chosen_letter,
        plain_system_prompt=SYSTEM_PROMPT,
        follow_up=FOLLOW_UP,
        description="The letter of the correct choice, e.g. C.",
    )

    def task_prompt(self, ctx: RolloutContext) -> str:
        return render_question(str(ctx.instance["question"]), ctx.instance["choices"])

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        predicted = self.final_answer.given(ctx, result)
        if predicted is None:
            return no_answer()
        gold = str(ctx.instance["answer"])
        return Reward(float(predicted == gold), {"predicted": predicted, "gold": gold})
