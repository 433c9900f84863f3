"""The runtime's state directory: leases, per-sandbox directories, loopback allocations.

Layout (short paths on purpose: a Unix socket path must fit in 108 bytes)::

    <root>/leases/<sandbox id>.json     who owns each sandbox (see lease.py)
    <root>/sb/<sandbox id>/sock/        the sandbox's socket directory (0700, bound only into it)
    <root>/sb/<sandbox id>/work/        its workspace on the host (unless a tmpfs)
    <root>/sb/<sandbox id>/log          the launcher's stdout/stderr
    <root>/addr/<127.x.y.z>             loopback address ownership (see netaddr.py)

The root defaults to ``$XDG_RUNTIME_DIR/agentroll`` or ``/tmp/agentroll-<uid>``; it is
created 0700 and refused if another user owns it or it is a symlink (a shared /tmp is hostile).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from agentroll.runtime.errors import SandboxError


def default_root() -> Path:
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "agentroll"
    return Path(f"/tmp/agentroll-{os.geteuid()}")


def new_sandbox_id() -> str:
    return secrets.token_hex(6)


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` 0700 if missing; refuse one that is a symlink or owned by someone else."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as exc:
        raise SandboxError(f"cannot create state directory {path}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"state directory {path} is not a directory owned by uid {os.geteuid()}")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class StateDir:
    def __init__(self, root: Path | None = None) -> None:
        self.root = ensure_private_dir(Path(root) if root else default_root())
        self.leases = ensure_private_dir(self.root / "leases")
        self.sandboxes = ensure_private_dir(self.root / "sb")
        self.addresses = ensure_private_dir(self.root / "addr")

    def sandbox_dir(self, sandbox_id: str) -> Path:
        return self.sandboxes / sandbox_id

    def make_sandbox_dirs(self, sandbox_id: str, *, workspace: bool) -> Path:
        base = self.sandbox_dir(sandbox_id)
        base.mkdir(mode=0o700)
        (base / "sock").mkdir(mode=0o700)
        if workspace:
            (base / "work").mkdir(mode=0o755)
        return base

    def remove_sandbox_dirs(self, sandbox_id: str) -> None:
        shutil.rmtree(self.sandbox_dir(sandbox_id), ignore_errors=True)
