"""A per-sandbox ``pids`` cgroup, used where rlimits cannot cap the number of processes.

The kernel does not enforce RLIMIT_NPROC for processes whose host uid is 0, which is what a
bubblewrap sandbox started by a root server runs as (its in-sandbox uid maps to the caller).
Where the ``pids`` controller is writable (cgroup v1, or v2 with ``pids`` delegated), each
sandbox gets ``<controller>/agentroll/<sandbox id>`` with ``pids.max``; its ``cgroup.procs`` is
also an exact list of the sandbox's processes for teardown.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def _pids_base() -> Path | None:
    """The writable directory under which this process may create pids cgroups."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _src, opts = [*post.split(), "", "", ""][:3]
        mnt = pre.split()[4]
        if fstype == "cgroup" and "pids" in opts.split(","):
            v1 = mnt
        elif fstype == "cgroup2":
            v2 = mnt
    for entry in own:
        hid, ctrls, path = entry.split(":", 2)
        if v1 and "pids" in ctrls.split(","):
            base = Path(v1) / path.lstrip("/")
            break
        if v2 and hid == "0" and not v1:
            base = Path(v2) / path.lstrip("/")
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    return None
            except OSError:
                return None
            break
    else:
        return None
    return base if os.access(base, os.W_OK) else None


class PidsCgroup:
    """One sandbox's pids cgroup. All methods are quick synchronous filesystem writes."""

    _base: Path | bool | None = False  # False: not probed yet

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def base(cls) -> Path | None:
        if cls._base is False:
            cls._base = _pids_base()
        return cls._base if isinstance(cls._base, Path) else None

    @classmethod
    def create(cls, sandbox_id: str, max_pids: int) -> PidsCgroup | None:
        """The sandbox's cgroup with ``pids.max`` set, or None where cgroups are unavailable."""
        base = cls.base()
        if base is None:
            return None
        path = base / "agentroll" / sandbox_id
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "pids.max").write_text(str(max_pids))
        except OSError as exc:
            log.warning("cannot create pids cgroup %s: %s", path, exc)
            return None
        return cls(path)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in self.procs_file.read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self) -> bool:
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True
