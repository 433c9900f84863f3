"""Final-answer extraction and mathematical equivalence.

Cheap checks first (exact text after normalisation, exact rational arithmetic); only
answers those cannot decide go to math-verify's symbolic comparison, in a worker thread
(its own signal-based timeout works only on the main thread, so the caller bounds it).
"""

import asyncio
import logging
import re
from fractions import Fraction

_BOXED = "\\boxed{"
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_SIMPLE_FRAC = re.compile(r"^(-?\d+)/(\d+)$")


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


def normalize(answer: str) -> str:
    text = answer.strip().strip("$").strip()
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", " ", "^\\circ", "^{\\circ}", "\\%"):
        text = text.replace(token, "")
    return text.rstrip(".")


def as_rational(answer: str) -> Fraction | None:
    text = normalize(answer).replace(",", "")
    if m := _FRAC.match(text):
        sign, num, den = m.groups()
        value = Fraction(int(num), int(den)) if int(den) else None
        return None if value is None else (-value if sign else value)
    if (m := _SIMPLE_FRAC.match(text)) and int(m.group(2)):
        return Fraction(int(m.group(1)), int(m.group(2)))
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _symbolic_equal(gold: str, predicted: str) -> bool:
    from math_verify import parse, verify  # heavy (sympy): imported on first use only

    # It warns on every call that we disabled its signal-based timeouts; the caller bounds time.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${predicted}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


async def answers_match(gold: str, predicted: str, *, timeout_s: float = 10.0) -> bool:
    """True when `predicted` is mathematically the same answer as `gold`."""
    if normalize(gold) == normalize(predicted):
        return True
    gold_value, pred_value = as_rational(gold), as_rational(predicted)
    if gold_value is not None and pred_value is not None:
        return gold_value == pred_value
    return await asyncio.wait_for(asyncio.to_thread(_symbolic_equal, gold, predicted), timeout_s)
