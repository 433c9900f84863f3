"""A sandbox's launcher, once dead and reaped, gives its pid back to the kernel; the next
process to get that pid (another sandbox's launcher, under churn) leads a process group
with the same id. Tearing the dead sandbox down must never signal that group.

On a busy node pids wrap in minutes (pid_max is 32768 by default), so this is not
hypothetical: a stale group kill takes down a healthy neighbour, whose rollout then
reports a lost action server or a sandbox that exited 137 before it was ready.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP

from agentroll.runtime import SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing"),
    pytest.mark.skipif(
        not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK),
        reason="choosing the next pid needs CAP_SYS_ADMIN (ns_last_pid)",
    ),
]


def take_pid(pid: int, deadline_s: float = 20.0) -> subprocess.Popen[bytes]:
    """A new session (so a process group) whose pid is `pid`, once the kernel frees it."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
        if proc.pid == pid:
            return proc
        proc.kill()  # another fork got there first, or the id is still in use: again
        proc.wait()
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} was not handed out again within {deadline_s}s")


async def test_teardown_never_signals_a_reused_process_group(
    bwrap: BwrapRuntime, tmp_path: Path
) -> None:
    sandbox = await bwrap.start(SandboxSpec(label="dies-first"), timeout=60)
    launcher = sandbox.pid
    assert launcher is not None
    os.killpg(launcher, signal.SIGKILL)  # it dies under its owner, as after an OOM kill
    async with asyncio.timeout(30):
        while sandbox.alive:  # until the owner has reaped it
            await asyncio.sleep(0.02)
    neighbour = await asyncio.to_thread(take_pid, launcher)
    try:
        await sandbox.stop()
        await asyncio.sleep(0.1)
        assert neighbour.poll() is None, "the dead sandbox's teardown killed a stranger"
    finally:
        neighbour.kill()
        neighbour.wait()
