"""Many arithmetic transcripts from a few real ones: what copying new numbers takes.

A tool-using arithmetic rollout is the same conversation whatever the numbers: the question
names an expression, the policy copies it into the `python` tool, the tool prints the value,
the policy submits it. Learning to *copy* new numbers needs thousands of distinct questions;
a sandboxed rollout costs about half a second each on two cores. So a few hundred rollouts
run through agentroll for real, and each further question is written by substituting its
expression and value into one of them, run by run (a run: consecutive tokens of one loss-
mask value), and tokenizing each run as agentroll's scripted backend would.

The substitution is checked, not trusted: before it is used, every real arithmetic
transcript must come out of `ArithmeticTemplate.fill` token for token from its own
question alone (`verified_template`). A change in the handler's prompts, the chat template,
the tool-output format or the tokenizer that the substitution would not reproduce stops
the build instead of training on transcripts agentroll would never render.
"""

import hashlib
import random
from dataclasses import dataclass

from agentroll.handlers.builtin.math import MathTask
from agentroll.handlers.builtin.math.arithmetic import arithmetic_tasks, parse_arithmetic
from agentroll.testing.scripted_llm.tokenizer import ScriptedTokenizer, get_tokenizer
from agentroll.testing.tinypolicy.data import Sequence

SYNTHETIC_SEED = 7_000_001
"""Arithmetic seed of the written questions (the real ones, evaluation and GRPO use others)."""


def held_out(question: str) -> bool:
    """About one arithmetic question in ten, chosen by its text: never trained on, the only
    ones evaluated. Two-term questions are few (under 30,000), so a large training set holds
    most of them: a split by draw seed would evaluate questions the policy was trained on."""
    return hashlib.sha256(question.encode()).digest()[0] < 26


def held_out_tasks(count: int, seed: int) -> list[MathTask]:
    """The first `count` held-out questions drawn from `seed`."""
    drawn = count * 12
    while True:
        found = [t for t in arithmetic_tasks(drawn, seed=seed) if held_out(t.question)]
        if len(found) >= count:
            return found[:count]
        drawn *= 2


def mask_runs(seq: Sequence) -> list[tuple[int, list[int]]]:
    """(mask value, ids) for each maximal run of equal loss-mask values."""
    runs: list[tuple[int, list[int]]] = []
    for token, mask in zip(seq.input_ids, seq.loss_mask, strict=True):
        if runs and runs[-1][0] == mask:
            runs[-1][1].append(token)
        else:
            runs.append((mask, [token]))
    return runs


@dataclass(frozen=True)
class ArithmeticTemplate:
    """A real arithmetic transcript as text runs, its expression and value marked."""

    runs: tuple[tuple[int, str], ...]
    expression: str
    answer: str
    handler: str

    @classmethod
    def of(cls, seq: Sequence, tokenizer: ScriptedTokenizer) -> "ArithmeticTemplate | None":
        """The template of `seq`, or None if it is no arithmetic transcript."""
        runs = tuple((mask, tokenizer.decode(ids)) for mask, ids in mask_runs(seq))
        task = parse_arithmetic(runs[0][1]) if runs else None
        if task is None or task.python is None:
            return None
        expression = task.python.removeprefix("print(").removesuffix(")")
        return cls(runs, expression, task.answer, seq.handler)

    def fill(self, task: MathTask, tokenizer: ScriptedTokenizer) -> Sequence:
        """The transcript of `task`: the expression replaced where the question and the
        tool call name it, the value where the tool prints it and the policy submits it."""
        expression = (task.python or "").removeprefix("print(").removesuffix(")")
        ids: list[int] = []
        mask: list[int] = []
        for i, (value, text) in enumerate(self.runs):
            # The expression appears before the tool has answered, the value only after.
            old, new = (self.expression, expression) if i < 2 else (self.answer, task.answer)
            run = tokenizer.encode(text.replace(old, new))
            ids += run
            mask += [value] * len(run)
        return Sequence(input_ids=ids, loss_mask=mask, handler=self.handler)


def verified_template(real: list[Sequence]) -> ArithmeticTemplate:
    """A template that writes every real arithmetic transcript in `real` exactly."""
    tokenizer = get_tokenizer()
    found = [(s, t) for s in real if (t := ArithmeticTemplate.of(s, tokenizer))]
    if not found:
        raise RuntimeError("no arithmetic transcript to build a template from")
    # A value that also occurs in the template's fixed text would be replaced there too:
    # prefer a template whose value and expression are long and rare.
    _, template = max(found, key=lambda st: (len(st[1].answer), len(st[1].expression)))
    for seq, own in found:
        task = parse_arithmetic(f"Compute {own.expression}.")
        assert task is not None
        written = template.fill(task, tokenizer)
        if (written.input_ids, written.loss_mask) != (seq.input_ids, seq.loss_mask):
            raise RuntimeError(
                f"substituting {own.expression!r} into the template does not give agentroll's "
                "own transcript of it: the prompts, tool output or tokenizer changed shape"
            )
    return template


def question_of(seq: Sequence) -> str | None:
    """The arithmetic question a transcript answers, if it answers one."""
    task = parse_arithmetic(get_tokenizer().decode(mask_runs(seq)[0][1]))
    return task.question if task else None


def with_synthetic(real: list[Sequence], count: int, seed: int = SYNTHETIC_SEED) -> list[Sequence]:
    """`real` without held-out questions, plus up to `count` transcripts of further questions
    (drawn from `seed`; held-out ones and those already in `real` skipped), written from a
    template verified against `real`."""
    template = verified_template(real)
    tokenizer = get_tokenizer()
    questions = [question_of(s) for s in real]
    kept = [s for s, q in zip(real, questions, strict=True) if q is None or not held_out(q)]
    seen = set(questions)
    written = [
        template.fill(task, tokenizer)
        for task in arithmetic_tasks(count, seed=seed)
        if task.question not in seen and not held_out(task.question)
    ]
    random.Random(seed).shuffle(written)
    return kept + written
