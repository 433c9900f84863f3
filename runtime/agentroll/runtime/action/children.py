"""The action server's descendants: reaping the orphans it inherits, and killing them all.

As the PID namespace's init (bwrap), or as a child subreaper elsewhere (guard.py), the server
becomes the parent of every process the agent orphans, and must reap them: a zombie keeps its
pid, and pids are what a fork bomb exhausts. The exit statuses of its own sessions' processes
(bash, the kernel) belong to those sessions, which report them to the agent; the sessions
register them (``own``/``disown``) and the reaper leaves them alone. The reaper counts what it
reaped (``orphans_reaped``): as init, every process that outlived its parent ends up here, even
one that exits a moment later, so a count that grew says one did.

``kill_all`` is ``stop_agent``'s weapon. As init, ``kill(-1, SIGKILL)`` reaches every other
process of the namespace at once, while the kernel holds back new forks. Elsewhere each
descendant is killed through a pidfd, after checking it is still one of ours (a pid may be
reused by then), round after round until none is left.
"""

from __future__ import annotations

import contextlib
import os
import signal

from agentroll.runtime.action.guard import Confinement, is_namespace_init


def _stat(pid: int) -> tuple[str, int] | None:
    """``(state, parent pid)`` of ``pid``, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and ')'
    return fields[0].decode(), int(fields[1])


_PF_EXITING = 0x4  # a task flag (include/linux/sched.h), set as it begins to exit
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def doomed(pid: int) -> bool:
    """Whether ``pid`` is gone or on its way out: exiting, a zombie, or a SIGKILL pending.

    A SIGKILL lands only when its target next runs, late on a busy node, so a process the
    agent killed a moment ago can still look alive to ``waitpid``.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return True
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_EXITING:
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & _SIGKILL_BIT)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def describe_exit(status: int | None) -> str:
    """How a process ended, for the agent: ``status`` is an exit code or -signal."""
    if status is None:
        return "exited"
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = "unknown signal"
    hint = ", e.g. out of memory or kill -9" if -status == signal.SIGKILL else ""
    return f"was killed by signal {-status} ({name}{hint})"


class Children:
    """Everything below the server; sessions ``own`` the processes whose status they read."""

    def __init__(self, confinement: Confinement) -> None:
        self._confinement = confinement
        self._own: set[int] = set()
        self._me = os.getpid()
        self.orphans_reaped = 0
        """Orphans reaped since the server started (never the sessions' own processes)."""

    def own(self, pid: int) -> None:
        """A session's process: its session reaps it and reports how it ended."""
        self._own.add(pid)

    def disown(self, pid: int) -> None:
        """The session is done with ``pid`` (reaped it, or left it to the orphan reaper)."""
        self._own.discard(pid)

    def confine(self, pid: int) -> None:
        """Put a tool process under the agent's limits before it runs anything of the agent's."""
        self._confinement.apply(pid)

    def reap_orphans(self) -> int:
        """Reap every child that has exited and is not a session's own; how many were reaped."""
        try:
            waiting = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return 0
        if waiting is None:
            return 0  # nothing has exited: no need to read /proc
        reaped = 0
        for pid in _pids():
            if pid in self._own:
                continue
            stat = _stat(pid)
            if stat is not None and stat[0] == "Z" and stat[1] == self._me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                    reaped += 1
        self.orphans_reaped += reaped
        return reaped

    def agent_pids(self) -> list[int]:
        """Live processes below the server: as init, every other process of the namespace."""
        if is_namespace_init():
            return [p for p in _pids() if p != self._me and _live(p)]
        return sorted(self._descendants())

    def _descendants(self) -> set[int]:
        children: dict[int, list[int]] = {}
        for pid in _pids():
            stat = _stat(pid)
            if stat is not None and stat[0] != "Z":
                children.setdefault(stat[1], []).append(pid)
        found: set[int] = set()
        todo = [self._me]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def kill_all(self) -> None:
        """SIGKILL every process of the agent that exists now (see the module docstring)."""
        if is_namespace_init():
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            return
        family = self._descendants()
        for pid in family:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            try:
                stat = _stat(pid)
                if stat is not None and (stat[1] in family or stat[1] == self._me):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)


def _live(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"
