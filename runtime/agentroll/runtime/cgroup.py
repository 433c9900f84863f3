"""Per-sandbox cgroups: the agent's processes share one process count, memory limit and CPU share.

Where the server may write to the ``pids``, ``memory`` and ``cpu`` controllers (a root server;
cgroup v1 hierarchies or a v2 hierarchy with them delegated), every sandbox gets
``<our own cgroup>/agentroll/<sandbox id>`` in each: ``pids.max`` from ``max_processes`` (the
kernel does not enforce RLIMIT_NPROC for a root server's sandboxes, whose uid maps to 0),
a memory limit from ``max_total_memory_bytes`` (swap included, where accounted), and the
default CPU share, so a fork bomb gets one sandbox's fair share of the CPU, never the node.

Only the agent's processes live there -- the action server moves its tools in (it is handed
open ``cgroup.procs`` descriptors) and ``exec`` joins before it runs -- while the server stays
in ours: the agent's process count and memory never stop it from answering or from starting a
fresh shell, and an out-of-memory kill inside the limit can only pick an agent process.
``cgroup.procs`` is also an exact list of the agent's processes for teardown.

A command that must be limited in CPU time rather than wall time (a grader: a busy node must
not time out an honest answer) runs in a child cgroup of its own (``child``), under the
sandbox's limits, whose CPU time it reads (``cpu_seconds``: ``cpuacct.usage`` on v1, the
``usage_usec`` of ``cpu.stat`` on v2); meanwhile the sandbox's CPU share is raised
(``set_cpu_share``), so graders get more of a busy node than agents do.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agentroll.runtime.base import Limits

log = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory", "cpu", "cpuacct")
V1_ONLY = frozenset({"cpuacct"})
"""v2 has no such controller: its CPU time is in every cgroup's ``cpu.stat``."""
#: Where each setting lives: (cgroup v1 file, cgroup v2 file).
_FILES = {
    "pids": ("pids.max", "pids.max"),
    "memory": ("memory.limit_in_bytes", "memory.max"),
    "swap": ("memory.memsw.limit_in_bytes", "memory.swap.max"),
    "cpu": ("cpu.shares", "cpu.weight"),
}
DEFAULT_CPU_SHARE = {False: 1024, True: 100}
"""The kernel's default ``cpu.shares`` (v1) and ``cpu.weight`` (v2)."""


def find_bases(mountinfo: str, own: str) -> dict[str, tuple[Path, bool]]:
    """Our own cgroup per controller, ``(directory, is_v2)``, from /proc/self/{mountinfo,cgroup}.

    A controller bound to a v1 hierarchy is used there; otherwise the v2 hierarchy is its
    candidate (usable only if delegated to us, which the caller checks).
    """
    v1: dict[str, str] = {}
    v2_mount = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _src, opts = [*post.split(), "", "", ""][:3]
        fields = pre.split()
        if len(fields) < 5:
            continue
        if fstype == "cgroup":
            for ctrl in set(opts.split(",")) & set(CONTROLLERS):
                v1[ctrl] = fields[4]
        elif fstype == "cgroup2":
            v2_mount = fields[4]
    bases: dict[str, tuple[Path, bool]] = {}
    for entry in own.splitlines():
        hid, ctrls, path = entry.split(":", 2)
        for ctrl in ctrls.split(","):
            if ctrl in v1:
                bases[ctrl] = (Path(v1[ctrl]) / path.lstrip("/"), False)
        if hid == "0" and v2_mount:
            for ctrl in CONTROLLERS:
                if ctrl not in V1_ONLY:
                    bases.setdefault(ctrl, (Path(v2_mount) / path.lstrip("/"), True))
    return bases


def _usable(base: Path, ctrl: str, v2: bool) -> bool:
    if not os.access(base, os.W_OK):
        return False
    if not v2:
        return True
    try:  # v2: the controller must already be enabled for our children (delegated)
        return ctrl in (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


class SandboxCgroup:
    """One sandbox's cgroups: a directory per hierarchy (one for v2, one per controller for v1).

    All methods are quick synchronous filesystem operations.
    """

    _bases: dict[str, tuple[Path, bool]] | None = None  # probed once per process

    def __init__(
        self,
        paths: list[Path],
        *,
        dirs: dict[str, Path] | None = None,
        v2: frozenset[str] = frozenset(),
    ) -> None:
        #: Each directory once.
        self.paths = sorted(set(paths))
        #: Controller -> the directory holding its files (known for the cgroups we create).
        self.dirs = dict(dirs or {})
        self._v2 = v2

    @classmethod
    def bases(cls) -> dict[str, tuple[Path, bool]]:
        """Usable controllers and our own cgroup in each (empty where cgroups are not writable)."""
        if cls._bases is None:
            try:
                found = find_bases(
                    Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text()
                )
            except OSError:
                found = {}
            cls._bases = {c: b for c, b in found.items() if _usable(b[0], c, b[1])}
        return cls._bases

    @classmethod
    def controllers(cls) -> set[str]:
        return set(cls.bases())

    @classmethod
    def create(
        cls, sandbox_id: str, limits: Limits, *, bases: dict[str, tuple[Path, bool]] | None = None
    ) -> SandboxCgroup | None:
        """The sandbox's cgroups with its limits set, or None where none can be created."""
        bases = cls.bases() if bases is None else bases
        if not bases:
            return None
        dirs = {ctrl: base / "agentroll" / sandbox_id for ctrl, (base, _) in bases.items()}
        v2 = frozenset(ctrl for ctrl, (_, is_v2) in bases.items() if is_v2)
        cgroup = cls(list(dirs.values()), dirs=dirs, v2=v2)
        try:
            cgroup._make()
            cgroup._limit(limits)
        except OSError as exc:
            log.warning("cannot set up the cgroups of sandbox %s: %s", sandbox_id, exc)
            cgroup.remove()
            return None
        return cgroup

    def _make(self) -> None:
        for ctrl, path in self.dirs.items():
            path.parent.mkdir(exist_ok=True)
            if ctrl in self._v2:  # let the sandboxes below ``agentroll`` use the controller
                control = path.parent / "cgroup.subtree_control"
                if ctrl not in control.read_text().split():
                    control.write_text(f"+{ctrl}")
            path.mkdir(exist_ok=True)

    def _file(self, ctrl: str, setting: str) -> Path | None:
        path = self.dirs.get(ctrl)
        return None if path is None else path / _FILES[setting][ctrl in self._v2]

    def _limit(self, limits: Limits) -> None:
        settings = [("pids", "pids", limits.max_processes)]
        memory = limits.max_total_memory_bytes
        settings.append(("memory", "memory", memory))
        swap = self._file("memory", "swap")
        if memory is not None and swap is not None and swap.exists():
            # v1 counts memory and swap together, v2 swap alone: either way, no escape to swap.
            settings.append(("memory", "swap", 0 if "memory" in self._v2 else memory))
        settings.append(("cpu", "cpu", DEFAULT_CPU_SHARE["cpu" in self._v2]))
        for ctrl, setting, value in settings:
            path = self._file(ctrl, setting)
            if path is not None and value is not None:
                path.write_text(str(value))

    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in self.paths]

    def open_procs(self) -> list[int]:
        """Write-only descriptors of every ``cgroup.procs``, for the action server to hold."""
        fds: list[int] = []
        try:
            for path in self.procs_files():
                fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def pids(self) -> list[int]:
        """Every member, those of child cgroups (``child``) included."""
        found: set[int] = set()
        for path in self.paths:
            for procs in [path / "cgroup.procs", *path.glob("*/cgroup.procs")]:
                try:
                    found.update(int(x) for x in procs.read_text().split())
                except (OSError, ValueError):
                    continue
        return sorted(found)

    def remove(self) -> bool:
        """Remove every directory, child cgroups first (only empty cgroups can go); True once
        none is left."""
        gone = True
        for path in self.paths:
            children = [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []
            for doomed in [*children, path]:
                try:
                    doomed.rmdir()
                except FileNotFoundError:
                    continue
                except OSError:
                    gone = False
        return gone

    def child(self, name: str) -> SandboxCgroup | None:
        """A child cgroup in every hierarchy, under this one's limits, for one command whose
        CPU time is measured (``cpu_seconds``); None where CPU time cannot be read."""
        dirs = {ctrl: path / name for ctrl, path in self.dirs.items()}
        child = SandboxCgroup(list(dirs.values()), dirs=dirs, v2=self._v2)
        try:
            for path in child.paths:
                path.mkdir(exist_ok=True)
            if child.cpu_seconds() is not None:
                return child
        except (OSError, ValueError) as exc:
            log.warning("cannot set up a child cgroup %s: %s", name, exc)
        child.remove()
        return None

    def cpu_seconds(self) -> float | None:
        """CPU time of every process that ran in this cgroup (None: not accounted here)."""
        acct = self.dirs.get("cpuacct")
        if acct is not None and "cpuacct" not in self._v2:
            return int((acct / "cpuacct.usage").read_text()) / 1e9
        unified = next((self.dirs[c] for c in sorted(self._v2)), None)
        if unified is None:
            return None
        for line in (unified / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None

    def set_cpu_share(self, factor: int) -> None:
        """This cgroup's CPU share, as a multiple of the default one (where it is set)."""
        path = self._file("cpu", "cpu")
        if path is not None:
            path.write_text(str(factor * DEFAULT_CPU_SHARE["cpu" in self._v2]))
