"""Multiple-choice answer extraction, robust to the formats models actually use.

Tried in order, the last match of each kind winning (a model that reconsiders ends with its
final choice): `\\boxed{C}` (also `\\boxed{\\text{C}}`, `\\boxed{(C)}`), "Answer: C" / "the
answer is C" / "correct option is (C)", a parenthesised "(C)", and a reply that is just the
letter ("C", "C.", "C)").
"""

import re

from agentroll.handlers.builtin.math.answers import extract_boxed

# The keyword in any case, the letter in upper case only ("the answer is a bit long" is no A).
_ANSWER_IS = re.compile(
    r"(?i:answer|choice|option)(?:\s+is)?\s*:?\s*(?:\*\*)?\s*[\(\[]?([A-Z])[\)\]]?(?![A-Za-z0-9])"
)
_PAREN = re.compile(r"\(([A-Z])\)")
_BARE = re.compile(r"^\s*\(?([A-Z])[\).:]?\s*$")
_BOXED_LETTER = re.compile(r"^\(?(?:\\text(?:bf)?\{)?\s*\(?([A-Z])\)?\s*\}?\)?$")


def choice_letters(n: int) -> str:
    if not 2 <= n <= 26:
        raise ValueError(f"a multiple-choice question needs 2 to 26 choices, not {n}")
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n]


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """The chosen letter (upper case) among `letters`, or None if the reply names none."""
    boxed = extract_boxed(text)
    if boxed is not None:
        m = _BOXED_LETTER.match(boxed.strip())
        if m and m.group(1) in letters:
            return m.group(1)
    for pattern in (_ANSWER_IS, _PAREN):
        found = [m.group(1) for m in pattern.finditer(text) if m.group(1) in letters]
        if found:
            return found[-1]
    m = _BARE.match(text)
    if m and m.group(1) in letters:
        return m.group(1)
    return None
