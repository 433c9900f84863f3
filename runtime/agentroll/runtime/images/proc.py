"""Owned, bounded subprocesses for build tools, with output going to a log file.

Build tools run for minutes and print a lot, so their output goes to a file, never a pipe.
Each runs in its own session; on timeout or cancellation the whole process group gets
SIGTERM, a grace period, then SIGKILL, and is reaped before we return.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentroll.runtime.images.errors import BuildFailed, BuildTimeout

TERM_GRACE_S = 10.0


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait_s)
            return
        except TimeoutError:
            continue


async def run_logged(
    argv: Sequence[str],
    *,
    log_path: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    what: str | None = None,
) -> None:
    """Run ``argv`` to completion, appending its output to ``log_path``; raise on failure."""
    what = what or Path(argv[0]).name
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        try:
            rc = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            await _stop_group(proc)
            raise BuildTimeout(
                f"{what} ran past {round(timeout_s, 1):g} s (log: {log_path})"
            ) from None
        except BaseException:  # cancelled: never leave the tool running
            await _stop_group(proc)
            raise
    if rc != 0:
        raise BuildFailed(
            f"{what} exited with status {rc}; last lines:\n{tail(log_path)}", log_path=log_path
        )


async def capture(argv: Sequence[str], *, timeout_s: float = 20.0) -> str:
    """Short command whose stdout we want (tool versions); '' when it fails."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except BaseException:
        await _stop_group(proc)
        raise
    return out.decode(errors="replace").strip() if proc.returncode == 0 else ""


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below ``path`` (deepest first), from /proc/self/mountinfo."""
    root = str(path.resolve())
    found = []
    try:
        info = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    for line in info.splitlines():
        point = line.split(" ")[4].encode().decode("unicode_escape")
        if point == root or point.startswith(root + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)
