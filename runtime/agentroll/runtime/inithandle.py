"""A handle on a sandbox's init process that a reused pid can never impersonate.

A bare pid names whatever process holds that number now: once the sandbox's init has died and
been reaped, ``nsenter -t <pid>`` would join some other process's namespaces. The handle is a
pidfd, opened right after the sandbox starts (and checked then to be in the sandbox's PID
namespace). Before each ``exec`` it checks through the pidfd that the init still lives, opens
the init's namespaces, root and working directory, and checks once more: the files then
certainly belong to the init, whose pid cannot be reused while it lives. ``nsenter`` is given
those open files (``--mount=/proc/<our pid>/fd/N``...), never the pid, so a command runs in the
sandbox or not at all. The files stay ours (close-on-exec), open until the command is over,
and never reach the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator

from agentroll.runtime import procs
from agentroll.runtime.errors import SandboxClosed, SandboxStartError

#: /proc/<pid>/ns entries and the nsenter option that enters each.
NAMESPACES = (
    ("user", "--user"),
    ("cgroup", "--cgroup"),
    ("ipc", "--ipc"),
    ("uts", "--uts"),
    ("net", "--net"),
    ("pid", "--pid"),
    ("mnt", "--mount"),
    ("time", "--time"),
)


class InitHandle:
    """A pidfd on the sandbox's init; ``close`` it at teardown."""

    def __init__(self, pid: int, pidns: int | None) -> None:
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError as exc:
            raise SandboxStartError(f"the sandbox's init (pid {pid}) is gone: {exc}") from exc
        self.pid = pid
        if pidns is not None and procs.pidns_of(pid) != pidns:
            self.close()
            raise SandboxStartError(f"pid {pid} is no longer the sandbox's init")

    @property
    def alive(self) -> bool:
        """False once the init has exited (a pidfd turns readable then) or the handle is closed."""
        if self._pidfd < 0:
            return False
        poller = select.poll()  # not select(): descriptors above 1023 are common in a server
        poller.register(self._pidfd, select.POLLIN)
        return not poller.poll(0)

    def kill(self) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def _require_alive(self, sandbox_id: str) -> None:
        if not self.alive:
            raise SandboxClosed(f"sandbox {sandbox_id} is gone: its init process has exited")

    @contextlib.contextmanager
    def nsenter_options(self, sandbox_id: str) -> Iterator[list[str]]:
        """nsenter options entering the init's namespaces, root and cwd; valid inside the block."""
        self._require_alive(sandbox_id)
        fds: list[int] = []
        try:
            options = []
            for name, option in NAMESPACES:
                try:
                    fd = os.open(f"/proc/{self.pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # a namespace type this kernel does not have
                except OSError as exc:
                    raise SandboxClosed(f"sandbox {sandbox_id} is gone: {exc}") from exc
                fds.append(fd)
                if os.fstat(fd).st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
                    options.append(f"{option}={_fd_path(fd)}")  # like -a: only the ones we lack
            for entry, option in (("root", "--root"), ("cwd", "--wd")):
                try:
                    fd = os.open(f"/proc/{self.pid}/{entry}", os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise SandboxClosed(f"sandbox {sandbox_id} is gone: {exc}") from exc
                fds.append(fd)
                options.append(f"{option}={_fd_path(fd)}")
            self._require_alive(sandbox_id)  # so everything opened is the init's
            yield options
        finally:
            for fd in fds:
                os.close(fd)


def _fd_path(fd: int) -> str:
    return f"/proc/{os.getpid()}/fd/{fd}"
