import pytest

from agentroll.handlers.builtin.answers import answers_match, as_rational, extract_boxed
from agentroll.handlers.builtin.math import MathHandler, load_math_tasks


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


@pytest.mark.parametrize(
    ("gold", "predicted", "same"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("\\frac{1}{2}", "1/2", True),
        ("42", "42.0", True),
        ("1,000", "1000", True),
        ("-\\frac{3}{4}", "-0.75", True),
        ("42", "41", False),
        ("2\\sqrt{2}", "\\sqrt{8}", True),  # symbolic path (math-verify)
        ("2\\sqrt{2}", "\\sqrt{7}", False),
        ("x^2+1", "1+x^2", True),
    ],
)
async def test_answers_match(gold: str, predicted: str, same: bool) -> None:
    assert await answers_match(gold, predicted) is same


def test_rational_parsing() -> None:
    assert as_rational("\\dfrac{6}{4}") == as_rational("1.5")
    assert as_rational("\\frac{1}{0}") is None
    assert as_rational("x") is None


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
