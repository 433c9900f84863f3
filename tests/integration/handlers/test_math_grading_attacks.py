"""The policy's pathological answers cost it reward 0, never the server's time or memory.

Each attack is graded with a heartbeat task ticking beside it on the same event loop: the
grader this replaced ran math-verify in a thread, where `2^{2^{40}}` held the GIL and froze
the loop (and `/healthz`) for minutes. Now each answer is reward 0 with a reason, the loop
keeps ticking, and the pool grades correctly afterwards.
"""

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from tests.integration.handlers.grading_helpers import (
    MAX_HEARTBEAT_GAP_S,
    grading_workers,
    heartbeat,
    peak_address_space,
    running,
    until_gone,
)

from agentroll.handlers import AgentResult, RolloutContext
from agentroll.handlers.builtin.grading_pool import GradingPool, shutdown_default_pool
from agentroll.handlers.builtin.math import MathHandler
from agentroll.handlers.builtin.math.answers import Grade, answers_match

pytestmark = pytest.mark.integration

STOPPED = {"grading_timeout", "not_equal"}
"""Stopped by the hard timeout, or by the memory limit (math-verify then says not equal)."""

ATTACKS = [
    pytest.param("2^{2^{40}}", STOPPED, id="power-tower"),
    pytest.param("10^{10^{10}}", STOPPED, id="huge-power"),
    pytest.param("9!!!!!!", STOPPED, id="iterated-factorial"),
    pytest.param("(10^{10})!", STOPPED, id="huge-factorial"),
    pytest.param("10^{" + "9" * 1_500 + "}", STOPPED, id="long-exponent"),
    pytest.param("{" * 300 + "1" + "}" * 300, STOPPED, id="nested-braces"),
    pytest.param("(" * 400 + "1" + ")" * 400, STOPPED, id="nested-parentheses"),
    pytest.param("x^" * 400 + "2", STOPPED, id="exponent-chain"),
    pytest.param("\\frac{1}{0}", {"not_equal"}, id="division-by-zero"),
    pytest.param("\\frac{0}{0}", {"not_equal"}, id="zero-by-zero"),
    pytest.param("\x00\ud800\\boxed{", {"not_equal", "unparsable_answer"}, id="garbage"),
    pytest.param("9" * 1_000_000, {"answer_too_long"}, id="one-megabyte"),
]


@pytest.fixture
async def pool() -> AsyncIterator[GradingPool]:
    pool = GradingPool(size=1, timeout_s=2.0)
    try:
        yield pool
    finally:
        await pool.shutdown()


@pytest.mark.parametrize(("predicted", "reasons"), ATTACKS)
async def test_attack_is_reward_zero_and_the_loop_keeps_ticking(
    pool: GradingPool, predicted: str, reasons: set[str]
) -> None:
    async with heartbeat() as beat:
        grade = await answers_match("5", predicted, pool=pool)
    assert not grade.equal and grade.reason in reasons
    assert beat.worst_gap_s < MAX_HEARTBEAT_GAP_S
    assert os.getpid() not in pool.worker_pids
    assert await answers_match("5", "5.0", pool=pool) == Grade(True, "equal")  # still grading


async def test_a_worker_that_overruns_is_killed_and_replaced(pool: GradingPool) -> None:
    assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
    [first] = pool.worker_pids
    async with heartbeat() as beat:
        grade = await answers_match("5", "9!!!!!!", pool=pool)
    assert grade == Grade(False, "grading_timeout")
    assert beat.worst_gap_s < MAX_HEARTBEAT_GAP_S
    assert not running(first)  # the grading ran there, and that process is gone
    assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
    assert pool.worker_pids != [first]


async def test_a_flood_of_attacks_queues_on_the_pool() -> None:
    pool = GradingPool(size=2, timeout_s=2.0)
    most_workers = 0

    async def count_workers() -> None:
        nonlocal most_workers
        while True:
            most_workers = max(most_workers, len(grading_workers()))
            await asyncio.sleep(0.05)

    counter = asyncio.create_task(count_workers())
    try:
        async with heartbeat() as beat:
            grades = await asyncio.gather(
                *(answers_match("5", f"{n}^{{{n}^{{40}}}}", pool=pool) for n in range(2, 10))
            )
    finally:
        counter.cancel()
        await pool.shutdown()
    assert {g.reason for g in grades} <= STOPPED and not any(g.equal for g in grades)
    assert 1 <= most_workers <= 2  # eight answers, never more than the pool's two workers
    assert beat.worst_gap_s < MAX_HEARTBEAT_GAP_S


async def test_honest_answers_behind_a_flood_are_graded_late_never_failed() -> None:
    """One worker, a deadline of 1 s: eight pathological answers hold it for several seconds,
    and the honest answers queued behind them still get their right verdicts."""
    pool = GradingPool(size=1, timeout_s=1.0)
    try:
        attacks = [answers_match("5", f"{n}^{{{n}^{{40}}}}", pool=pool) for n in range(2, 10)]
        honest = [answers_match("\\frac{1}{2}", "0.5", pool=pool) for _ in range(4)]
        grades = await asyncio.gather(*attacks, *honest)
    finally:
        await pool.shutdown()
    assert [g.equal for g in grades[8:]] == [True] * 4
    assert not any(g.equal for g in grades[:8])


async def test_cancelling_a_grading_kills_its_worker(pool: GradingPool) -> None:
    assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
    [busy] = pool.worker_pids
    with pytest.raises(TimeoutError):  # e.g. the EVAL stage's own timeout
        await asyncio.wait_for(answers_match("5", "2^{2^{40}}", pool=pool), 0.5)
    assert await until_gone([busy]) == []
    assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")


async def test_a_memory_hungry_answer_stays_within_the_workers_limit() -> None:
    limit = 192 << 20
    pool = GradingPool(size=1, timeout_s=60.0, memory_limit_bytes=limit)
    peak = 0

    async def watch_peak() -> None:
        nonlocal peak
        while not pool.worker_pids:  # the worker that grades the answer, once it starts
            await asyncio.sleep(0.005)
        [pid] = pool.worker_pids
        while True:
            peak = max(peak, peak_address_space(pid))
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch_peak())
    try:
        grade = await answers_match("5", "2^{2^{30}}", pool=pool)  # a 128 MiB integer, squared
    finally:
        watcher.cancel()
        await pool.shutdown()
    assert not grade.equal and grade.reason in {"not_equal", "grading_crashed"}
    assert 64 << 20 < peak <= limit  # it grew, and the limit held


@dataclass
class Ctx:
    instance: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)


async def test_the_math_handler_scores_a_boxed_power_tower_zero_with_a_reason() -> None:
    handler, ctx = MathHandler(), cast(RolloutContext, Ctx({"question": "?", "answer": "5"}))
    result = AgentResult("The answer is \\boxed{2^{2^{40}}}.")
    assert handler.final_answer.given(ctx, result) == "2^{2^{40}}"
    try:
        async with heartbeat() as beat:
            reward = await handler.grade(ctx, result)
    finally:
        await shutdown_default_pool()
    assert reward.value == 0.0 and reward.info["reason"] in STOPPED
    assert reward.info["predicted"] == "2^{2^{40}}" and reward.info["gold"] == "5"
    assert beat.worst_gap_s < MAX_HEARTBEAT_GAP_S
