"""How the action server guards itself against the agent's processes, and confines them.

The agent's tools -- bash, the IPython kernel and everything they start -- run as the server's
own uid, so they could signal it, ptrace it, read its memory and environment, or exhaust what
it needs. Whatever they do must end as an observation for the agent, never as a lost server
(an ``infra_error`` that training would drop, leaving the behaviour unpenalised). So:

* The server makes itself non-dumpable (``PR_SET_DUMPABLE`` 0): a process without
  CAP_SYS_PTRACE in the server's user namespace can neither ptrace it nor open its /proc
  memory, environment or descriptors. (The kernel resets this on execve, so the tools it
  starts are ordinary, dumpable processes.)
* It is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the agent orphans or detaches
  stays below it, to be reaped and killed by ``stop_agent`` (children.py). As a PID
  namespace's init (bwrap) it is that anyway.
* As a PID namespace's init it has no handler for any terminating signal: the kernel drops
  such signals sent from inside the namespace (and SIGKILL and SIGSTOP always), so only the
  host can end it: the ``shutdown`` request, or SIGKILL from outside. Python's own SIGINT
  handler is removed for that. Elsewhere, serving a sandbox (``--single-client``), SIGTERM,
  SIGINT and SIGHUP get a handler that does nothing (handlers, unlike ignored signals, do not
  pass on to the tools); SIGKILL and SIGSTOP cannot be guarded against there.

Every tool process is confined (``Confinement.apply``) before it runs anything of the agent's:
``oom_score_adj`` 1000 (children inherit it) so an out-of-memory kill picks the agent's
processes; the sandbox's rlimits (the server runs without them, so a CPU-time or process limit
the agent exhausts never ends it); and the sandbox's cgroups, through ``cgroup.procs``
descriptors the host hands over (the server stays outside them: the agent's processes and
memory count against the agent's limits only).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Sequence

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
AGENT_OOM_SCORE_ADJ = 1000
RLIMITS = {
    "nproc": resource.RLIMIT_NPROC,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
}
_TERMINATING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def parse_rlimit(text: str) -> tuple[int, int]:
    """``NAME=VALUE`` (names as prlimit's options: nproc, as, fsize, cpu, nofile)."""
    name, sep, value = text.partition("=")
    if not sep or name not in RLIMITS or not value.isdigit():
        raise ValueError(f"bad rlimit {text!r}: expected NAME=VALUE, NAME one of {sorted(RLIMITS)}")
    return RLIMITS[name], int(value)


def is_namespace_init() -> bool:
    return os.getpid() == 1


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def harden(*, single_client: bool) -> None:
    """Guard this process (the server) before anything of the agent's runs."""
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if is_namespace_init():
        for sig in _TERMINATING:
            signal.signal(sig, signal.SIG_DFL)
    elif single_client:
        for sig in _TERMINATING:
            signal.signal(sig, _shrug)


def _shrug(signum: int, frame: object) -> None:
    """Handler for termination signals the server must outlive."""


class Confinement:
    """What every tool process gets: OOM priority, the sandbox's rlimits and cgroups."""

    def __init__(self, rlimits: Sequence[tuple[int, int]] = (), cgroup_fds: Sequence[int] = ()):
        self.rlimits = list(rlimits)
        self.cgroup_fds = list(cgroup_fds)
        for fd in self.cgroup_fds:
            os.set_inheritable(fd, False)  # handed over inheritable; the tools must not get them

    def apply(self, pid: int) -> None:
        """Confine ``pid`` (a tool process that runs nothing of the agent's yet)."""
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as f:
                f.write(str(AGENT_OOM_SCORE_ADJ))
            for which, wanted in self.rlimits:
                _, hard = resource.getrlimit(which)
                # Raising a hard limit needs privileges: never ask for more than ours.
                value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
                resource.prlimit(pid, which, (value, value))
            for fd in self.cgroup_fds:
                os.write(fd, f"{pid}\n".encode())
        except (ProcessLookupError, FileNotFoundError):
            return  # it died already; its session notices and reports that
