"""What the math-grading tests observe from outside: worker processes and the event loop."""

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

HEARTBEAT_PERIOD_S = 0.02
MAX_HEARTBEAT_GAP_S = 2.0
"""Generous: the GIL-holding grader this guards against froze the loop for minutes."""


def _stat(pid: int | str) -> list[str]:
    """/proc/PID/stat from the field after the command name (state, parent, ...); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie has exited)."""
    stat = _stat(pid)
    return bool(stat) and stat[0] not in ("Z", "X")


def exists(pid: int) -> bool:
    """The process, even a zombie, is still there (not yet reaped)."""
    return Path(f"/proc/{pid}").exists()


def open_files(pid: int) -> dict[str, str]:
    """The process's descriptors and what they point at (`pipe:[..]`, `socket:[..]`, a path)."""
    return {fd.name: os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}


def address_space_limit(pid: int) -> tuple[str, str]:
    """The process's RLIMIT_AS (soft, hard) as /proc shows it."""
    limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
    soft, hard = next(line for line in limits if "address space" in line).split()[3:5]
    return soft, hard


def peak_address_space(pid: int) -> int:
    """The largest the process's address space has been, in bytes (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(status.split("VmPeak:")[1].split()[0]) * 1024


async def until_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """Waits until none of `pids` runs; returns those still running after `timeout_s`."""
    give_up = time.monotonic() + timeout_s
    while any(running(p) for p in pids) and time.monotonic() < give_up:
        await asyncio.sleep(0.05)
    return [p for p in pids if running(p)]


def grading_workers() -> list[int]:
    """Every running grading worker process on this machine that this process started."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            mine = _stat(proc.name)[1:2] == [str(os.getpid())]
            if mine and b"grading_worker" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return [pid for pid in found if running(pid)]


class Heartbeat:
    """Ticks on the event loop beside the code under test; `worst_gap_s` is its longest wait."""

    def __init__(self) -> None:
        self.worst_gap_s = 0.0
        self._last = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        self.worst_gap_s = max(self.worst_gap_s, now - self._last)
        self._last = now

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_PERIOD_S)
            self.tick()


@contextlib.asynccontextmanager
async def heartbeat() -> AsyncIterator[Heartbeat]:
    beat = Heartbeat()
    task = asyncio.create_task(beat._beat())
    try:
        yield beat
    finally:
        beat.tick()  # a loop blocked until now shows up even if the task never ran again
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
