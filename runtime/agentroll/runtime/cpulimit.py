"""A CPU-time limit for one ``exec``: the command is killed once its own cgroup has used that
much CPU time, however long a busy node makes it wait for it.

A wall-clock limit lets siblings' load time an honest grader out (a reward of 0 that is the
node's doing); CPU time is what the command itself consumed. The cgroup is the exec's own
(``SandboxCgroup.child``), so the count includes every process it started and nothing else.

A grader passes its limit as ``cpu_limit_s`` and ``grading_wall_s(limit)`` as the exec's
``timeout``: a wall-clock backstop for a command that waits instead of computing, generous
(4x, + 30 s) but ending before the stage that grades does (``GradingUsage.deadline``, set by
whoever runs the grader), so a command that sleeps is stopped and graded, never left to time
the stage out. ``GradingUsage`` also adds up the graders' CPU and wall time for the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from agentroll.runtime.cgroup import SandboxCgroup

T = TypeVar("T")
CPU_POLL_S = 0.1
"""How often the cgroup's CPU time is read; the limit may be overrun by about this much per
CPU the command keeps busy."""
GRADING_CPU_SHARE = 4
"""A sandbox's CPU share while a CPU-limited exec runs in it, in default shares: graders get
four times an agent's share of a busy node."""
WALL_BACKSTOP_FACTOR = 4.0
WALL_BACKSTOP_EXTRA_S = 30.0


@dataclass
class GradingUsage:
    """What the CPU-limited execs of one grading (one rollout's EVAL) used, and by when their
    wall-clock backstops must end."""

    deadline: float | None = None
    """``time.monotonic()`` by which a backstop ends (None: nothing bounds it): the grading
    stage's end, or the end of the agent's share of the job's deadline when that comes first."""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    unmeasured: int = 0
    """Execs whose CPU time nothing counted (no cgroups): their limit was wall-clock."""

    def add(self, wall_s: float, cpu_s: float | None) -> None:
        self.wall_s += wall_s
        if cpu_s is None:
            self.unmeasured += 1
        else:
            self.cpu_s += cpu_s


grading_usage: ContextVar[GradingUsage | None] = ContextVar("grading_usage", default=None)
"""The grading in progress in this task (set by the server around EVAL)."""


def grading_wall_s(cpu_limit_s: float, *, reserve_s: float = 0.0) -> float:
    """The wall-clock backstop of an exec limited to ``cpu_limit_s`` of CPU time: four times
    that and 30 s more, ending ``reserve_s`` (what the grader does after it) before the grading
    stage does; never below the limit itself."""
    backstop = cpu_limit_s * WALL_BACKSTOP_FACTOR + WALL_BACKSTOP_EXTRA_S
    usage = grading_usage.get()
    if usage is not None and usage.deadline is not None:
        backstop = min(backstop, usage.deadline - reserve_s - time.monotonic())
    return max(cpu_limit_s, backstop)


def grading_wall_cut_short(cpu_limit_s: float, *, reserve_s: float = 0.0) -> bool:
    """Whether the grading stage's end cuts the wall-clock backstop of an exec limited to
    ``cpu_limit_s`` below its usual four times and 30 s (``grading_wall_s``): a run timed out
    then may have been stopped by the time the rollout left it, not by its own slowness."""
    usual = cpu_limit_s * WALL_BACKSTOP_FACTOR + WALL_BACKSTOP_EXTRA_S
    return grading_wall_s(cpu_limit_s, reserve_s=reserve_s) < usual


class CpuLimit:
    def __init__(self, meter: SandboxCgroup, limit_s: float) -> None:
        self.meter = meter
        self.limit_s = limit_s
        self.used_s = 0.0

    def measure(self) -> float:
        """CPU seconds used so far (the last reading when the cgroup is gone)."""
        with contextlib.suppress(OSError, ValueError):
            self.used_s = self.meter.cpu_seconds() or self.used_s
        return self.used_s

    async def bound(self, work: Awaitable[T]) -> T:
        """`work`'s result, or `TimeoutError` once the limit is used up (work cancelled)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=CPU_POLL_S)
                if done:
                    return task.result()
                if self.measure() > self.limit_s:
                    raise TimeoutError(f"used {self.used_s:.1f} s of CPU time")
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
