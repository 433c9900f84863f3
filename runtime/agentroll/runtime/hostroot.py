"""What a sandbox sees of the host: system directories read-only, and the Python to run.

"Host root read-only" never means the whole ``/``: only the system directories (``/usr``,
``/etc`` and the merged-usr links) are bound, so ``/root``, ``/home``, ``/work``, ``/tmp`` and
the server's state stay invisible. Inside a bubblewrap sandbox started by root, host root-owned
files appear owned by the sandbox user, so everything under ``/etc`` that is not world-readable
(``/etc/shadow``, private keys) is masked.

To run the action server from the host's environment, the interpreter's prefix, the virtual
environment and the folder that holds ``agentroll.runtime`` are bound read-only at their own
paths (the editable install's ``.pth`` then resolves as on the host).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")


@functools.cache
def system_entries() -> tuple[tuple[str, str, str], ...]:
    """(kind, source, dest) for each system directory: kind is "symlink" or "dir"."""
    out = []
    for name in SYSTEM_DIRS:
        path = f"/{name}"
        if os.path.islink(path):
            out.append(("symlink", os.readlink(path), path))
        elif os.path.isdir(path):
            out.append(("dir", path, path))
    return tuple(out)


@functools.cache
def private_etc_entries() -> tuple[tuple[str, str], ...]:
    """(kind, path) under /etc that are not world-readable: kind is "file" or "dir"."""
    out = []
    for dirpath, dirnames, filenames in os.walk("/etc"):
        for name in list(dirnames):
            p = os.path.join(dirpath, name)
            if _unreadable(p, stat.S_ISDIR):
                out.append(("dir", p))
                dirnames.remove(name)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if _unreadable(p, stat.S_ISREG):
                out.append(("file", p))
    return tuple(out)


def _unreadable(path: str, is_kind: Callable[[int], bool]) -> bool:
    """``path`` is of that kind (not followed if a link) and not world-readable."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return is_kind(mode) and not mode & stat.S_IROTH


def runtime_source_root() -> Path:
    """The folder on sys.path that holds ``agentroll/runtime`` (a source tree or site-packages)."""
    import agentroll.runtime

    return Path(next(iter(agentroll.runtime.__path__))).resolve().parents[1]


@functools.cache
def python_dirs() -> tuple[str, ...]:
    """Host directories the host interpreter needs to run ``agentroll.runtime.action``."""
    dirs = {
        os.path.realpath(sys.base_prefix),
        os.path.realpath(sys.prefix),
        str(runtime_source_root()),
    }
    system = tuple(f"/{d}/" for d in SYSTEM_DIRS)
    # Directories already covered by the system binds (e.g. /usr) need no bind of their own.
    kept = sorted(d for d in dirs if not (d + "/").startswith(system))
    # Drop nested ones: binding a parent covers its children.
    return tuple(d for d in kept if not any(d != o and d.startswith(o + "/") for o in kept))


def python_executable() -> str:
    """The interpreter to start inside host-root sandboxes (the venv's, not its target).

    Normalised (`a/../b` -> `b`) but not resolved: the venv's own path is what keeps the venv
    active, and a path through directories the sandbox does not have would not exist there.
    """
    return os.path.abspath(sys.executable)


def seen_by_sandboxes(path: str | os.PathLike[str]) -> bool:
    """``path`` lies in a host directory that host-root sandboxes bind (the system directories,
    the interpreter's): whatever is kept there, a policy can read."""
    real = os.path.realpath(path)
    roots = (*(f"/{name}" for name in SYSTEM_DIRS), *python_dirs())
    return any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots)
