"""`answers_match` gives math-verify's own verdict on every pair of a 434-pair corpus.

The corpus (`data/math_answer_pairs.jsonl`: gold, predicted, category) covers commas and
thousands separators, percentages, sets, tuples and intervals, units, LaTeX forms,
scientific notation, negative numbers, huge and malformed answers. The reference is
math-verify called directly (`math_verify_reference.py`, its own timeouts, generous). Two
documented bounds decide before math-verify and are expected as such: an answer over
`MAX_ANSWER_CHARS` is not equal, and so is a pair math-verify itself times out on.
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.grading_pool import GradingPool
from agentroll.handlers.builtin.math.answers import MAX_ANSWER_CHARS, answers_match

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
CORPUS = HERE / "data" / "math_answer_pairs.jsonl"


def load_corpus() -> list[dict[str, str]]:
    return [json.loads(line) for line in CORPUS.read_text("utf-8").splitlines() if line]


async def reference_verdicts(pairs: list[dict[str, str]]) -> list[dict[str, Any]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "math_verify_reference.py"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    requests = "".join(json.dumps(p) + "\n" for p in pairs).encode()
    try:
        out, _ = await asyncio.wait_for(process.communicate(requests), 240)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
    return [json.loads(line) for line in out.splitlines()]


def test_corpus_covers_what_graders_get_wrong() -> None:
    pairs = load_corpus()
    assert len(pairs) >= 300
    assert {p["category"] for p in pairs} >= {
        "plain-number",
        "commas",
        "percent",
        "sets",
        "intervals",
        "units",
        "latex",
        "scientific",
        "negative",
        "huge",
        "malformed",
    }
    assert any(len(p["predicted"]) > MAX_ANSWER_CHARS for p in pairs)


async def test_answers_match_agrees_with_math_verify_on_every_pair() -> None:
    pairs = load_corpus()
    checked = [p for p in pairs if len(p["predicted"]) <= MAX_ANSWER_CHARS]
    pool = GradingPool()
    try:
        reference, grades = await asyncio.gather(
            reference_verdicts(checked),
            asyncio.gather(*(answers_match(p["gold"], p["predicted"], pool=pool) for p in pairs)),
        )
    finally:
        await pool.shutdown()
    assert len(reference) == len(checked) and all(r["gold_parsed"] for r in reference)
    verdicts = iter(reference)
    expected = [
        next(verdicts)["equal"] if len(p["predicted"]) <= MAX_ANSWER_CHARS else False for p in pairs
    ]
    mismatches = [
        (p["category"], p["gold"][:60], p["predicted"][:60], grade.reason)
        for p, grade, equal in zip(pairs, grades, expected, strict=True)
        if grade.equal != equal
    ]
    assert mismatches == []
    assert sum(g.equal for g in grades) > len(pairs) // 4  # both verdicts are well represented
    assert sum(not g.equal for g in grades) > len(pairs) // 4
