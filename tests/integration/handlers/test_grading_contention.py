"""Honest grading on a busy node scores what it scores on an idle one.

The `swe` grader's pytest run (its real code path, `swe_pytest.run_pytest` and `judge`) grades
an honest, CPU-bound test suite under a limit twice the CPU time the suite needs idle; then
again while sibling sandboxes keep every core busy twice over. Its limit counts CPU time, so
the siblings slow it down but cannot time it out into a 0. The test asserts the scores; the
times are printed for the record.
"""

import asyncio
import os
import shutil
import time

import pytest

from agentroll.handlers.builtin.swe import swe_pytest
from agentroll.handlers.builtin.swe.swe_repo import GRADER_SCRATCH
from agentroll.runtime import Sandbox, SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.runtime.cpulimit import GradingUsage, grading_usage
from agentroll.runtime.sandbox import ProcessSandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
TESTS = """
def test_sums():
    assert sum(i * i for i in range(3_000_000)) == 8999995500000500000


def test_primes():
    primes = [n for n in range(2, 60_000) if all(n % d for d in range(2, int(n**0.5) + 1))]
    assert len(primes) == 6057
"""
IDS = ["test_honest.py::test_sums", "test_honest.py::test_primes"]
SPIN = ["python3", "-c", "while True: pass"]
OVERSUBSCRIPTION = 2


async def grade(
    sandbox: Sandbox, limit_s: float
) -> tuple[float, swe_pytest.PytestRun, GradingUsage]:
    """The honest suite's score under `limit_s` (1.0: resolved), its run and what it used."""
    usage = GradingUsage()
    token = grading_usage.set(usage)
    try:
        run = await swe_pytest.run_pytest(sandbox, "python3 -m pytest", IDS, timeout_s=limit_s)
    finally:
        grading_usage.reset(token)
    verdict = swe_pytest.judge(run, IDS, [])
    return float(verdict.resolved), run, usage


async def spin(runtime: BwrapRuntime, spinning: asyncio.Queue[str], stop: asyncio.Event) -> None:
    """One sibling sandbox keeping one CPU busy until `stop` (announced once it spins)."""
    sibling = await runtime.start(SandboxSpec(), timeout=120)
    try:
        busy = asyncio.create_task(sibling.exec(SPIN, timeout=600))
        assert isinstance(sibling, ProcessSandbox) and sibling.cgroup is not None
        # A process gives no event when it starts computing: its cgroup's CPU time does.
        while (sibling.cgroup.cpu_seconds() or 0.0) < 0.05:
            await asyncio.sleep(0.05)
        spinning.put_nowait(sibling.id)
        await stop.wait()
        busy.cancel()
        await asyncio.gather(busy, return_exceptions=True)
    finally:
        await sibling.stop()


async def test_honest_grading_scores_the_same_under_oversubscription(
    bwrap: BwrapRuntime,
) -> None:
    sandbox = await bwrap.start(SandboxSpec(scratch=(GRADER_SCRATCH,)), timeout=120)
    stop = asyncio.Event()
    siblings: list[asyncio.Task[None]] = []
    try:
        assert isinstance(sandbox, ProcessSandbox)
        if sandbox.cgroup is None or sandbox.cgroup.cpu_seconds() is None:
            pytest.skip("no cgroup counts CPU time here (a non-root server)")
        await sandbox.upload("test_honest.py", TESTS.encode())
        calibration = await sandbox.exec(
            ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", *IDS],
            timeout=600,
            cpu_limit_s=300,
        )
        assert calibration.exit_code == 0, calibration.stdout[-2000:]
        assert calibration.cpu_s is not None
        limit_s = 2 * calibration.cpu_s + 1  # what the suite needs idle, twice over

        idle_score, idle, idle_use = await grade(sandbox, limit_s)

        busy_cores = OVERSUBSCRIPTION * (os.cpu_count() or 1)
        spinning: asyncio.Queue[str] = asyncio.Queue()
        siblings = [asyncio.create_task(spin(bwrap, spinning, stop)) for _ in range(busy_cores)]
        async with asyncio.timeout(300):
            for _ in range(busy_cores):
                await spinning.get()
        busy_score, busy, busy_use = await grade(sandbox, limit_s)
        print(
            f"\nCPU limit {limit_s:.1f} s; {busy_cores} spinning siblings; "
            f"idle: {idle_use.cpu_s:.1f} s CPU in {idle_use.wall_s:.1f} s, score {idle_score}; "
            f"busy: {busy_use.cpu_s:.1f} s CPU in {busy_use.wall_s:.1f} s, score {busy_score}"
        )
        assert (idle_score, busy_score) == (1.0, 1.0), (idle.output_tail, busy.output_tail)
        assert not busy.timed_out and busy_use.unmeasured == 0
    finally:
        stop.set()
        await asyncio.gather(*siblings, return_exceptions=True)
        await sandbox.stop()


async def test_a_suite_that_sleeps_is_stopped_inside_the_grading_stage(
    bwrap: BwrapRuntime,
) -> None:
    """Sleeping costs no CPU time, so the wall-clock backstop stops it: before the grading
    stage ends (here in 10 s, not the 4 x 5 + 30 s it would otherwise allow), scored 0 --
    the policy's doing, never left to time the stage out."""
    sandbox = await bwrap.start(SandboxSpec(scratch=(GRADER_SCRATCH,)), timeout=120)
    try:
        await sandbox.upload(
            "test_honest.py", b"import time\n\ndef test_sums():\n    time.sleep(600)\n"
        )
        usage = GradingUsage(deadline=time.monotonic() + 10)
        token = grading_usage.set(usage)
        try:
            run = await swe_pytest.run_pytest(sandbox, "python3 -m pytest", IDS[:1], timeout_s=5)
        finally:
            grading_usage.reset(token)
        verdict = swe_pytest.judge(run, IDS[:1], [])
        assert run.timed_out and not verdict.resolved
        assert verdict.reason == "tests_timed_out", verdict
        assert usage.wall_s < 5 * 4 + 30, usage  # the stage's end came first
    finally:
        await sandbox.stop()
