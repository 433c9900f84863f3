"""What the builder knows about the agentroll it runs from: version, source tree, machine.

These values reach templates as variables (``agentroll_version``, ``arch``, ``use_lock``) and
feed the cache key, so an image is rebuilt when agentroll's version changes.
"""

from __future__ import annotations

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


def machine_arch() -> str:
    """The host CPU as wheel platform tags spell it (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def template_context(*, use_lock: bool) -> dict[str, object]:
    """Builder-provided template variables (beside ``params``)."""
    return {"agentroll_version": agentroll_version(), "arch": machine_arch(), "use_lock": use_lock}
