"""Math grading through real worker processes: verdicts, whose fault a failure is, lifecycle.

Every worker is owned: shut down (by the pool or by the server) leaves no process behind,
workers inherit none of the server's sockets, carry an address-space limit, run niced below
the server, and die with the server even when it is SIGKILLed.
"""

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.grading_helpers import (
    address_space_limit,
    exists,
    open_files,
    running,
    until_gone,
)

from agentroll.handlers import AgentResult, InfraError, RolloutContext
from agentroll.handlers.builtin import grading_pool
from agentroll.handlers.builtin.grading_pool import GradingPool, default_pool
from agentroll.handlers.builtin.math import MathHandler
from agentroll.handlers.builtin.math.answers import Grade, answers_match

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool() -> AsyncIterator[GradingPool]:
    pool = GradingPool(size=2, timeout_s=2.0)
    try:
        yield pool
    finally:
        await pool.shutdown()


VERDICTS = [
    ("\\frac{1}{2}", "0.5", True),
    ("\\frac{1}{2}", "1/2", True),
    ("42", "42.0", True),
    ("1,000", "1000", True),
    ("-\\frac{3}{4}", "-0.75", True),
    ("42", "41", False),
    ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("2\\sqrt{2}", "\\sqrt{7}", False),
    ("x^2+1", "1+x^2", True),
    ("12", "1, 2", False),  # the old fast path read "1, 2" as twelve: reward 1
    ("1,2", "2,1", True),  # ... and these as 12 and 21: reward 0 for the same set
    ("\\{1,2\\}", "\\{2,1\\}", True),
    ("0.5", "50\\%", True),
    ("5", "", False),
]


async def test_verdicts(pool: GradingPool) -> None:
    got = await asyncio.gather(*(answers_match(g, p, pool=pool) for g, p, _ in VERDICTS))
    assert [(g, p, grade.equal) for (g, p, _), grade in zip(VERDICTS, got, strict=True)] == VERDICTS
    assert got[-1] == Grade(False, "unparsable_answer")


async def test_a_gold_answer_math_verify_cannot_parse_is_infra_error(pool: GradingPool) -> None:
    with pytest.raises(InfraError, match="cannot parse the gold answer") as caught:
        await answers_match("\\text{}", "5", pool=pool)
    assert caught.value.cause == "invalid_gold_answer"
    assert await answers_match("5", "5.0", pool=pool) == Grade(True, "equal")


async def test_a_gold_answer_that_overruns_the_grader_is_infra_error(pool: GradingPool) -> None:
    with pytest.raises(InfraError, match="grading_timeout while math-verify parsed the gold"):
        await answers_match("x^" * 400 + "2", "5", pool=pool)


FORGED_VERIFIER = (
    "def parse(text, **_):\n    return [text]\n\n\ndef verify(*_, **__):\n    return True\n"
)


@pytest.mark.parametrize("shadowed", ["math_verify", "json", "logging"])
async def test_no_file_in_the_working_directory_or_pythonpath_is_imported_by_a_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shadowed: str
) -> None:
    """A worker imports only its own file, the standard library and math-verify: a module of
    the same name in the server's working directory or on PYTHONPATH never stands in."""
    (tmp_path / f"{shadowed}.py").write_text(FORGED_VERIFIER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = GradingPool(size=1)
    try:
        wrong, right = (
            await answers_match("2", "3", pool=pool),
            await answers_match("2", "2.0", pool=pool),
        )
    finally:
        await pool.shutdown()
    assert (wrong, right) == (Grade(False, "not_equal"), Grade(True, "equal"))


async def test_a_grader_that_cannot_start_is_infra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grading_pool, "WORKER_SCRIPT", "/nonexistent/grading_worker.py")
    pool = GradingPool(size=1)
    with pytest.raises(InfraError, match="grading worker exited") as caught:
        await answers_match("5", "5.0", pool=pool)
    assert caught.value.cause == "grader_unavailable" and pool.worker_pids == []
    await pool.shutdown()


async def test_shutdown_leaves_no_worker_process(pool: GradingPool) -> None:
    await asyncio.gather(answers_match("1", "1.0", pool=pool), answers_match("2", "2.0", pool=pool))
    pids = pool.worker_pids
    assert len(pids) == 2 and all(running(p) for p in pids) and os.getpid() not in pids
    await pool.shutdown()
    assert [p for p in pids if exists(p)] == []  # killed and reaped
    with pytest.raises(InfraError, match="shut down"):
        await answers_match("1", "1.0", pool=pool)


async def test_idle_workers_exit_and_come_back_on_demand() -> None:
    pool = GradingPool(size=1, idle_timeout_s=0.5)
    try:
        assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
        [idle] = pool.worker_pids
        assert await until_gone([idle]) == [] and pool.worker_pids == []
        assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
        assert len(pool.worker_pids) == 1
    finally:
        await pool.shutdown()


async def test_a_grading_cut_off_by_shutdown_is_infra_error_not_zero(pool: GradingPool) -> None:
    assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")  # a ready worker
    grading = asyncio.create_task(answers_match("5", "2^{2^{40}}", pool=pool))
    await asyncio.sleep(0.5)  # the worker is busy with the answer
    await pool.shutdown()
    with pytest.raises(InfraError, match="shut down"):
        await grading


async def test_the_server_shuts_its_grading_workers_down(agentroll_server: ServerFactory) -> None:
    async with agentroll_server():
        assert await answers_match("1", "1.0") == Grade(True, "equal")  # the server's loop's pool
        pids = default_pool().worker_pids
        assert pids and all(running(p) for p in pids)
    assert [p for p in pids if exists(p)] == []


async def test_workers_inherit_no_sockets_and_carry_a_memory_limit(pool: GradingPool) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)  # as the server's own listening socket is
    with listener:
        assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
        [pid] = pool.worker_pids
        fds = open_files(pid)
    assert set(fds) <= {"0", "1", "2", "3"}, fds  # stdin, stdout, stderr, the reply pipe
    assert not [target for target in fds.values() if target.startswith("socket:")]
    limit = str(grading_pool.DEFAULT_MEMORY_LIMIT_BYTES)
    assert address_space_limit(pid) == (limit, limit)
    # Grading the policy's answers yields the CPU to the server's event loop (the kernel caps
    # niceness at 19, which a test run under `nice` reaches).
    expected = min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)
    assert os.getpriority(os.PRIO_PROCESS, pid) == expected


async def test_workers_die_with_a_killed_server() -> None:
    server = (
        "import asyncio, sys\n"
        "from agentroll.handlers.builtin.grading_pool import GradingPool\n"
        "async def main():\n"
        "    pool = GradingPool(size=1)\n"
        "    await pool.grade('1', '1.0')\n"
        "    print(*pool.worker_pids, flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "asyncio.run(main())\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", server, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 120)
        [worker] = map(int, line.split())
        assert running(worker)
    finally:
        process.send_signal(signal.SIGKILL)  # no shutdown, no atexit: only the kernel is left
        await process.wait()
    assert await until_gone([worker]) == []


async def test_the_math_handler_reports_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = cast(RolloutContext, type("Ctx", (), {"instance": {"question": "?", "answer": "12"}}))
    handler = MathHandler()
    try:
        wrong = await handler.grade(ctx, AgentResult(submission={"answer": "1, 2"}))
        right = await handler.grade(ctx, AgentResult(submission={"answer": "12.0"}))
        too_long = await handler.grade(ctx, AgentResult(submission={"answer": "1" * 10_000}))
    finally:
        await grading_pool.shutdown_default_pool()
    assert wrong.value == 0.0
    assert wrong.info == {"predicted": "1, 2", "gold": "12", "reason": "not_equal"}
    assert (right.value, right.info["reason"]) == (1.0, "equal")
    assert (too_long.value, too_long.info["reason"]) == (0.0, "answer_too_long")
    assert too_long.info["predicted"] == "1" * 2_000


async def test_a_large_server_does_not_retire_every_worker() -> None:
    """A worker's peak memory is its own: `ru_maxrss` survives exec and would start at the
    forking server's size, so a server larger than a worker's memory limit retired every
    worker after one answer (and paid math-verify's slow import per grading)."""
    ballast = b"x" * (grading_pool.DEFAULT_MEMORY_LIMIT_BYTES + (256 << 20))  # touched pages
    pool = GradingPool(size=1)
    try:
        assert await answers_match("1", "1.0", pool=pool) == Grade(True, "equal")
        [first] = pool.worker_pids
        assert await answers_match("2", "2.0", pool=pool) == Grade(True, "equal")
        assert pool.worker_pids == [first]
    finally:
        await pool.shutdown()
        del ballast
