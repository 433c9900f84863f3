"""Finding a sandbox's processes through /proc, by this server's own markers.

A process belongs to sandbox ``S`` when any of these hold:

* its environment has ``AGENTROLL_SANDBOX_ID=S`` (set on the launcher and inside the sandbox);
* it lives in the sandbox's PID namespace (recorded at start; a process cannot leave it),
  counted only while a process known to be in it lives: the kernel gives a freed namespace's
  number to the next namespace made, at once, so a dead sandbox's number soon names another's;
* its command line contains a runtime-specific marker (an Apptainer instance name).

Never a broad process name. Scans read /proc synchronously, so async callers go through
``ProcScanner``, which runs them in a thread and lets concurrent callers share one scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

from agentroll.runtime.base import MARKER_ENV

_MARKER_PREFIX = MARKER_ENV.encode() + b"="
_SELF: dict[str, int] = {}


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    pidns: int
    sandbox_id: str | None
    cmdline: bytes


def pidns_of(pid: int) -> int | None:
    """Inode of the PID namespace of ``pid`` (None if it is gone or unreadable)."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return int(link[link.index("[") + 1 : -1])


@dataclass(frozen=True, slots=True)
class PidNamespace:
    """A PID namespace by its number, with a member (pid and start time) that vouches for it.

    A namespace lives while any of its processes does, so while the member lives the number
    is this namespace's. Once the member (the sandbox's init) is gone, the kernel has killed
    everything else in the namespace too, and the number may already be another sandbox's.
    """

    inode: int
    member: int
    member_start: int

    @classmethod
    def of(cls, pid: int, inode: int) -> PidNamespace | None:
        """The namespace ``inode`` vouched for by ``pid``; None if ``pid`` is not in it (now)."""
        started = start_time(pid)
        ns = None if started is None else cls(inode, pid, started)
        return ns if ns is not None and ns.alive() else None

    def alive(self) -> bool:
        return is_alive(self.member, self.member_start) and pidns_of(self.member) == self.inode


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """``/proc/<pid>/stat`` from the state on (index 0); None if it cannot be read."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # The command name may contain spaces and parentheses: fields restart after the last ')'.
    return stat[stat.rindex(b")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot: with the pid, a reuse-proof identity."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def is_alive(pid: int, started: int | None) -> bool:
    """True if ``pid`` exists, is not a zombie, and (when given) started at ``started``."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    return started is None or int(fields[19]) == started


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def scan() -> list[ProcInfo]:
    """Every process on the machine except this one, with its markers (blocking)."""
    me = os.getpid()
    out: list[ProcInfo] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        ns = pidns_of(pid)
        if ns is None or not is_alive(pid, None):
            continue  # gone, or a zombie: dead already, only its parent can reap it
        sid = None
        for entry in _read(f"/proc/{pid}/environ").split(b"\0"):
            if entry.startswith(_MARKER_PREFIX):
                sid = entry[len(_MARKER_PREFIX) :].decode(errors="replace")
                break
        out.append(ProcInfo(pid, ns, sid, _read(f"/proc/{pid}/cmdline")))
    return out


def _own_pidns() -> int:
    if "pidns" not in _SELF:
        _SELF["pidns"] = pidns_of(os.getpid()) or 0
    return _SELF["pidns"]


def select(
    procs: Iterable[ProcInfo],
    sandbox_id: str,
    *,
    pidns: int | None = None,
    cmdline_marker: bytes | None = None,
) -> list[int]:
    """Pids of ``procs`` that carry one of the sandbox's markers."""
    own_ns = _own_pidns()
    hits = []
    for p in procs:
        if (
            p.sandbox_id == sandbox_id
            or (pidns is not None and pidns != own_ns and p.pidns == pidns)
            or (cmdline_marker is not None and cmdline_marker in p.cmdline)
        ):
            hits.append(p.pid)
    return sorted(hits)


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (blocking /proc scan)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(name)
            if fields is not None and int(fields[2]) == pgid:
                out.append(int(name))
    return out


def kill(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_led_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group that `proc` (started in a new session) leads, while it is
    unreaped. Once reaped, its id may lead a stranger's group: then nothing is sent."""
    if proc.returncode is None:
        killpg(proc.pid, signal.SIGKILL)


class ProcScanner:
    """Shares /proc scans between concurrent callers (200 teardowns need not scan 200 times).

    A caller gets a scan that *started after* it asked, so a process that existed when it
    asked is never missed; callers that arrive while a scan runs wait for the next one.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._started = 0.0
        self._result: list[ProcInfo] = []

    async def snapshot(self) -> list[ProcInfo]:
        asked = time.monotonic()
        async with self._lock:
            if self._started > asked:
                return self._result
            self._started = time.monotonic()
            self._result = await asyncio.to_thread(scan)
            return self._result

    async def find(
        self,
        sandbox_id: str,
        *,
        pidns: PidNamespace | None = None,
        cmdline_marker: bytes | None = None,
    ) -> list[int]:
        # The namespace's number names it in this scan only if its member outlived the scan.
        vouched = pidns is not None and pidns.alive()
        procs = await self.snapshot()
        inode = pidns.inode if vouched and pidns is not None and pidns.alive() else None
        return select(procs, sandbox_id, pidns=inode, cmdline_marker=cmdline_marker)
