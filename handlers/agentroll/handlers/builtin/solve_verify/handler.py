"""`solve_verify`: two agents on the bundled math tasks, a solver and a verifier.

The job must declare both agents (`agents: {"solver": {...}, "verifier": {...}}`), each with
the policy it samples from; a frozen verifier is `"trainable": false`. Each round the solver
answers in `\\boxed{}`, and the verifier reads the question and that answer and ends its reply
with `VERDICT: correct` or `VERDICT: incorrect`. Unless the answer is accepted, the solver is
asked to check its work and answer again, for at most `max_rounds` rounds (and at most
`limits.max_turns`).

Task instance: the `math` handler's (`{"question": str, "answer": str}`), plus `max_rounds`
(1 to 8, default 3).

Rewards, graded by math-verify as `math` grades: the episode's is 1 if the solver's last answer
equals the reference, else 0; per agent, `solver` gets the same and `verifier` the fraction of
its verdicts that were right (a reply without a verdict is a wrong one). `reward_info`:
`{"gold", "rounds": [{"answer", "verdict", "correct"}, ...]}`.
"""

import re
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.base import AgentHandler, parsed_instance
from agentroll.handlers.builtin.math.answers import MAX_ANSWER_CHARS, answers_match, extract_boxed
from agentroll.handlers.builtin.math.handler import FOLLOW_UP
from agentroll.handlers.builtin.math.handler import SYSTEM_PROMPT as SOLVER_PROMPT
from agentroll.handlers.context import LLMSession, Reward, RolloutContext
from agentroll.server.schema.messages import ChatMessage

VERIFIER_PROMPT = (
    "You check a proposed answer to a math question. Work through the question yourself, then "
    "end with exactly one line: `VERDICT: correct` or `VERDICT: incorrect`."
)
QUESTION = "Question: "
PROPOSED = "Proposed answer: "
NO_ANSWER = "(none)"
RETRY = "A verifier judged your answer incorrect. Check your work. " + FOLLOW_UP
_VERDICT = re.compile(r"VERDICT:\s*(correct|incorrect)\b", re.IGNORECASE)


class SolveVerifyInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(..., min_length=1, max_length=100_000)
    answer: str = Field(..., min_length=1, max_length=10_000)
    max_rounds: int = Field(3, ge=1, le=8)


@dataclass
class Round:
    answer: str | None
    verdict: str | None = None
    """`correct`, `incorrect`, or None when the verifier gave none."""


def verifier_request(question: str, answer: str | None) -> str:
    return f"{QUESTION}{question}\n{PROPOSED}{answer or NO_ANSWER}\nIs the proposed answer right?"


def parse_verdict(text: str) -> str | None:
    """The last `VERDICT:` in the reply, lower-cased; None if there is none."""
    found = _VERDICT.findall(text)
    return found[-1].lower() if found else None


def _shown(answer: str | None) -> str | None:
    """An answer as reported in `reward_info` (bounded in size)."""
    return answer[:MAX_ANSWER_CHARS] if answer is not None else None


class SolveVerifyHandler(AgentHandler):
    name = "solve_verify"
    instance_model = SolveVerifyInstance
    agent_names: ClassVar[tuple[str, ...]] = ("solver", "verifier")

    async def run(self, ctx: RolloutContext) -> None:
        task = parsed_instance(ctx, SolveVerifyInstance, "solve_verify")
        solver, verifier = ctx.agents["solver"].llm, ctx.agents["verifier"].llm
        rounds: list[Round] = []
        ctx.state["rounds"] = rounds  # kept as they happen: EVAL scores what RUN got to
        await solver.start(
            [
                {"role": "system", "content": SOLVER_PROMPT},
                {"role": "user", "content": task.question},
            ]
        )
        for k in range(min(task.max_rounds, ctx.limits.max_turns)):
            if k:
                await solver.add_messages([{"role": "user", "content": RETRY}])
            answer = extract_boxed((await solver.generate()).text)
            # Kept whole: graded and shown to the verifier as sampled (an over-long answer is
            # refused by the grader, never cut down to something that might match).
            rounds.append(Round(answer))
            rounds[-1].verdict = await self._verify(verifier, task.question, answer, first=not k)
            if rounds[-1].verdict == "correct":
                break
        ctx.set_finish_reason("accepted" if rounds[-1].verdict == "correct" else "max_rounds")

    @staticmethod
    async def _verify(
        verifier: LLMSession, question: str, answer: str | None, *, first: bool
    ) -> str | None:
        request: ChatMessage = {"role": "user", "content": verifier_request(question, answer)}
        if first:
            await verifier.start([{"role": "system", "content": VERIFIER_PROMPT}, request])
        else:
            await verifier.add_messages([request])
        return parse_verdict((await verifier.generate()).text)

    async def eval(self, ctx: RolloutContext) -> Reward:
        gold = str(ctx.instance["answer"])
        rounds: list[Round] = ctx.state.get("rounds", [])
        graded: dict[str, bool] = {}
        for r in rounds:
            if r.answer is not None and r.answer not in graded:
                graded[r.answer] = (await answers_match(gold, r.answer)).equal
        correct = [r.answer is not None and graded[r.answer] for r in rounds]
        solved = float(bool(correct) and correct[-1])
        right = [
            r.verdict is not None and (r.verdict == "correct") == ok
            for r, ok in zip(rounds, correct, strict=True)
        ]
        info: dict[str, Any] = {
            "gold": gold,
            "rounds": [
                asdict(r) | {"answer": _shown(r.answer), "correct": ok}
                for r, ok in zip(rounds, correct, strict=True)
            ],
        }
        verifier = sum(right) / len(right) if right else 0.0
        return Reward(solved, info, agents={"solver": solved, "verifier": verifier})
