"""Build-tool subprocesses: logged, bounded, killed as a group on timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentroll.runtime.images import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import capture, mounts_under, run_logged


async def test_output_goes_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    await run_logged(["sh", "-c", "echo hello; echo oops >&2"], log_path=log, timeout_s=10)
    assert log.read_text() == "$ sh -c echo hello; echo oops >&2\nhello\noops\n"


async def test_failure_carries_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    with pytest.raises(BuildFailed, match=r"exited with status 3; last lines:\n.*\nbroken") as e:
        await run_logged(
            ["sh", "-c", "echo broken; exit 3"], log_path=log, timeout_s=10, what="tool"
        )
    assert e.value.log_path == log


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"echo $$ > {pidfile}; sleep 60 & sleep 60 & wait"
    with pytest.raises(BuildTimeout, match=r"sh ran past 0\.5 s"):
        await run_logged(["sh", "-c", script], log_path=tmp_path / "l", timeout_s=0.5)
    pgid = int(pidfile.read_text())
    await asyncio.sleep(0.1)
    assert live_members(pgid) == []  # no member of the build's process group survives


def live_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a group; orphans' zombies may linger unreaped here."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


async def test_capture_returns_stdout_or_empty() -> None:
    assert await capture(["sh", "-c", "echo v1.2"]) == "v1.2"
    assert await capture(["sh", "-c", "exit 1"]) == ""
    assert await capture(["no-such-binary-here"]) == ""


def test_mounts_under_sees_proc() -> None:
    assert Path("/proc") in mounts_under(Path("/proc"))
    assert mounts_under(Path("/proc/self/fd/no-such")) == []
