"""What the builder knows about the agentroll it runs from: version, source tree, machine.

These values reach templates as variables (``agentroll_version``, ``arch``, ``use_lock``) and
feed the cache key, so an image is rebuilt when agentroll's version changes — or, for an image
built from a source tree, when that tree's package files do.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
from pathlib import Path


def agentroll_version() -> str:
    try:
        return importlib.metadata.version("agentroll")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"  # running from a bare checkout: still a stable, visible value


def default_source_root() -> Path | None:
    """The source tree (holding pyproject.toml) this package was loaded from, if any."""
    root = Path(__file__).resolve().parents[4]
    return root if (root / "pyproject.toml").is_file() else None


PACKAGE_FOLDERS = ("server", "handlers", "runtime", "trainer_clients")


def source_digest(root: Path) -> str:
    """sha256 over the package files of a source tree (paths and bytes, caches excluded)."""
    digest = hashlib.sha256()
    files = sorted(
        path
        for folder in PACKAGE_FOLDERS
        for path in (root / folder / "agentroll").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )
    for path in [root / "pyproject.toml", *files]:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def machine_arch() -> str:
    """The host CPU as wheel platform tags spell it (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def template_context(*, use_lock: bool) -> dict[str, object]:
    """Builder-provided template variables (beside ``params``)."""
    return {"agentroll_version": agentroll_version(), "arch": machine_arch(), "use_lock": use_lock}
