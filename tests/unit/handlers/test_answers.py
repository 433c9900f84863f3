"""Answer extraction and what `answers_match` decides without math-verify (no process).

A pool that is already shut down stands in for math-verify: any pair that reaches it raises
`InfraError`, so these tests see exactly which pairs are decided before grading.
"""

from collections.abc import AsyncIterator

import pytest

from agentroll.handlers import InfraError
from agentroll.handlers.builtin.grading_pool import GradingPool
from agentroll.handlers.builtin.math import MathHandler, load_math_tasks
from agentroll.handlers.builtin.math.answers import (
    MAX_ANSWER_CHARS,
    Grade,
    answers_match,
    extract_boxed,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("nested \\boxed{\\sqrt{\\frac{a}{b}}}", "\\sqrt{\\frac{a}{b}}"),
        ("no box here", None),
        ("unclosed \\boxed{12", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.fixture
async def no_grader() -> AsyncIterator[GradingPool]:
    pool = GradingPool()
    await pool.shutdown()
    yield pool


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [("42", "42"), ("-3.50", " -3.50 "), ("0", "0"), ("1234567890" * 3, "1234567890" * 3)],
)
async def test_the_same_plain_number_is_equal_without_grading(
    gold: str, predicted: str, no_grader: GradingPool
) -> None:
    assert await answers_match(gold, predicted, pool=no_grader) == Grade(True, "equal")


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [
        ("42", "41"),  # even a plain "not equal" is math-verify's to say
        ("12", "1, 2"),  # a set, not twelve: the old fast path said equal
        ("1,2", "2,1"),  # the same set: the old fast path said not equal
        ("1000", "1,000"),
        ("0.5", "50\\%"),
        ("42", "42.0"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),  # identical, but not a plain number
        ("1" * 31, "1" * 31),  # a plain number longer than the fast path trusts
    ],
)
async def test_everything_else_goes_to_math_verify(
    gold: str, predicted: str, no_grader: GradingPool
) -> None:
    with pytest.raises(InfraError, match="shut down"):
        await answers_match(gold, predicted, pool=no_grader)


async def test_an_overlong_answer_is_zero_without_parsing(no_grader: GradingPool) -> None:
    assert len("1" * 1_000_000) > MAX_ANSWER_CHARS
    grade = await answers_match("1", "1" * 1_000_000, pool=no_grader)
    assert grade == Grade(False, "answer_too_long")
    assert await answers_match("7", " " * (MAX_ANSWER_CHARS + 1) + "7", pool=no_grader) == grade


def test_bundled_tasks_validate_and_are_self_consistent() -> None:
    tasks = load_math_tasks()
    assert len(tasks) >= 20
    assert len({t.id for t in tasks}) == len(tasks)
    handler = MathHandler()
    for task in tasks:
        handler.validate_instance(task.instance())
        assert extract_boxed(task.solution) is not None or task.answer in task.solution


def test_invalid_instance_is_a_readable_error() -> None:
    with pytest.raises(ValueError, match=r"invalid math instance.*answer"):
        MathHandler().validate_instance({"question": "1+1?"})
