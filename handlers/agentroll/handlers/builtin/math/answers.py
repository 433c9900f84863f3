"""Final-answer extraction and grading: math-verify decides, in a bounded worker process.

`answers_match(gold, predicted)` returns a `Grade` (`equal`, `reason`):
- an answer longer than `MAX_ANSWER_CHARS` is not equal (`answer_too_long`), decided
  without parsing it;
- the same plain number on both sides (`42` and `42`, `-3.5` and `-3.5`) is equal at once:
  math-verify confirms every such pair, and most right answers are of this kind. Nothing
  else is decided here, in either direction: `1, 2` against `12` is a set against a
  number, `1,000` may be a thousand or a tuple, `50\\%` may be 0.5;
- everything else is math-verify's verdict from a `GradingPool` worker process (see
  `grading_pool`: a timeout or a crash there is reward 0, a gold answer it cannot parse is
  `InfraError`).
"""

import re

from agentroll.handlers.builtin.grading_pool import Grade, GradingPool, default_pool

__all__ = ["MAX_ANSWER_CHARS", "Grade", "answers_match", "extract_boxed"]

MAX_ANSWER_CHARS = 2_000
"""Longer answers score 0 unparsed; a real one (even a matrix or a long set) is far shorter."""

_BOXED = "\\boxed{"
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_PLAIN_NUMBER_CHARS = 30  # what the differential test checked math-verify on


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, with nested braces; None if there is none."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def _same_plain_number(gold: str, predicted: str) -> bool:
    text = gold.strip()
    return (
        text == predicted.strip()
        and len(text) <= _MAX_PLAIN_NUMBER_CHARS
        and _PLAIN_NUMBER.fullmatch(text) is not None
    )


async def answers_match(gold: str, predicted: str, *, pool: GradingPool | None = None) -> Grade:
    """Whether `predicted` is the same answer as `gold`, by math-verify (see the module doc).

    `pool` defaults to the running loop's shared pool.
    """
    if len(predicted) > MAX_ANSWER_CHARS:
        return Grade(False, "answer_too_long")
    if _same_plain_number(gold, predicted):
        return Grade(True, "equal")
    return await (pool or default_pool()).grade(gold, predicted)
