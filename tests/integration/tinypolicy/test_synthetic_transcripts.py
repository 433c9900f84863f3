"""Written arithmetic transcripts are agentroll's own, token for token, and never the
held-out questions: checked against real scripted rollouts through sandboxes."""

import asyncio
import dataclasses

import pytest

from agentroll.handlers.builtin.math.arithmetic import parse_arithmetic
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer
from agentroll.testing.tinypolicy.data import (
    DataRecipe,
    Sequence,
    collect_transcripts,
    training_sequences,
)
from agentroll.testing.tinypolicy.synth import (
    ArithmeticTemplate,
    held_out,
    held_out_tasks,
    question_of,
    verified_template,
    with_synthetic,
)

pytestmark = pytest.mark.integration
RECIPE = DataRecipe(arithmetic=6, bundled_math_repeats=0, code_repeats=1, synthetic_arithmetic=0)


@pytest.fixture(scope="module")
def real() -> list[Sequence]:
    """Scripted rollouts through agentroll (bubblewrap): six arithmetic, the code tasks."""
    return training_sequences(asyncio.run(collect_transcripts(RECIPE)))


def test_the_template_writes_each_real_transcript_from_its_question_alone(
    real: list[Sequence],
) -> None:
    tokenizer = get_tokenizer()
    template = verified_template(real)
    arithmetic = [s for s in real if question_of(s)]
    assert len(arithmetic) == 6 and len(real) > 6  # the code transcripts are no template
    for seq in arithmetic:
        task = parse_arithmetic(question_of(seq) or "")
        assert task is not None
        written = template.fill(task, tokenizer)
        assert (written.input_ids, written.loss_mask) == (seq.input_ids, seq.loss_mask)
        assert sum(written.loss_mask) > 0


def test_a_transcript_the_substitution_would_not_reproduce_stops_the_build(
    real: list[Sequence],
) -> None:
    """E.g. a tool-output format the template does not know: a real transcript whose value
    is printed twice cannot be written from its question, and nothing is trained on."""
    tokenizer = get_tokenizer()
    seq = next(s for s in real if question_of(s))
    template = ArithmeticTemplate.of(seq, tokenizer)
    assert template is not None
    runs = list(template.runs)
    mask, text = runs[2]  # the tool's output: mask 0
    assert mask == 0 and template.answer in text
    runs[2] = (mask, text.replace(template.answer, f"{template.answer}\n{template.answer}"))
    changed = dataclasses.replace(template, runs=tuple(runs))
    other = next(s for s in real if question_of(s) and question_of(s) != question_of(seq))
    altered = changed.fill(parse_arithmetic(question_of(other) or ""), tokenizer)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="does not give agentroll's own transcript"):
        verified_template([seq, altered])


def test_held_out_questions_are_never_trained_on(real: list[Sequence]) -> None:
    sequences = with_synthetic(real, 3000, seed=5)
    questions = [question_of(s) for s in sequences]
    written = [q for q in questions if q]
    assert len(written) > 2000  # most draws are kept: about one in ten is held out
    assert not any(held_out(q) for q in written)
    assert sum(q is None for q in questions) == len(real) - 6  # the code transcripts stay
    evaluated = held_out_tasks(50, seed=9)
    assert len(evaluated) == 50 and all(held_out(t.question) for t in evaluated)
    assert not {t.question for t in evaluated} & set(written)
