"""The verifiers environments cache stays bounded: older copies of an environment go.

Each lock and package list is a folder of its own (venv.py), so a new lock (verifiers
upgraded) or an edited local package installs a new copy beside the old ones, ~570 MB each.
Copies of one package list (as jobs name it) for one interpreter are one lineage; after an
install, the copies beyond the newest `AGENTROLL_VERIFIERS_KEEP` (default 2, by last use; 0
keeps all) are deleted with their side files, by the image cache's rule
(`agentroll.runtime.images.evict`): never one in use, never one being installed or checked.

In use, by construction: the server process that set a copy up holds a shared flock on
`.locks/<folder>.use` for as long as it lives. Its workers run from that interpreter and die
with it; the kernel drops the lock when it dies, so a crashed server protects nothing.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from agentroll.runtime.images.cache import tree_size
from agentroll.runtime.images.evict import CacheEntry, PruneReport, last_use, prune_entries
from agentroll.runtime.imageuse import ImageUse, hold_shared
from agentroll.runtime.locked_venv import STAMP

RECORD_SUFFIX = ".env.json"
IN_USE = "in use by a server"

_held: dict[Path, ImageUse] = {}
"""The copies this process holds in use, until it exits."""


def _locks(base: Path, folder: str) -> tuple[Path, Path]:
    """The install lock (locked_venv.py's) and the use lock of one copy."""
    return base / ".locks" / f"{folder}.lock", base / ".locks" / f"{folder}.use"


def hold(base: Path, venv: Path, packages: Sequence[str]) -> bool:
    """Hold the copy `venv` in use for this process's life and record its lineage.

    False when eviction deleted it between its install check and now (install it again).
    """
    if venv in _held:
        return True
    use_lock = _locks(base, venv.name)[1]
    use_lock.parent.mkdir(parents=True, exist_ok=True)
    use = hold_shared(venv / STAMP, use_lock)
    if use is None:
        return False
    _held[venv] = use
    record = base / f"{venv.name}{RECORD_SUFFIX}"
    if not record.exists():  # copies installed before the cache was bounded join it here
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        lineage = {"prefix": venv.name.rsplit("-", 1)[0], "packages": sorted(packages)}
        record.write_text(json.dumps(lineage | {"python": python}, sort_keys=True) + "\n")
    return True


def _delete(base: Path, folder: str) -> int:
    venv = base / folder
    size = tree_size(venv)
    # The stamp first: from here on the copy is a half install, never used, redone if asked.
    (venv / STAMP).unlink(missing_ok=True)
    shutil.rmtree(venv)
    install_lock, use_lock = _locks(base, folder)
    for side in (".install.log", ".lock.txt", RECORD_SUFFIX):
        (base / f"{folder}{side}").unlink(missing_ok=True)
    use_lock.unlink(missing_ok=True)
    install_lock.unlink(missing_ok=True)
    return size


def _entry(record: Path, base: Path) -> CacheEntry | None:
    folder = record.name.removesuffix(RECORD_SUFFIX)
    try:
        lineage = json.loads(record.read_text())
        recorded = record.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not (base / folder / STAMP).exists():
        return None  # half installed: the next install of its key redoes it
    install_lock, use_lock = _locks(base, folder)
    return CacheEntry(
        name=folder,
        family=folder.rsplit("-", 1)[0],
        lineage=json.dumps(lineage, sort_keys=True),
        last_used=last_use(use_lock, recorded),
        build_lock=install_lock,
        use_lock=use_lock,
        delete=functools.partial(_delete, base, folder),
        reread=functools.partial(_entry, record, base),
    )


def prune_copies(base: Path, keep: int, *, spare: str | None = None) -> PruneReport:
    """Delete all but the newest `keep` copies of each environment under `base`."""
    found = (_entry(record, base) for record in sorted(base.glob(f"*{RECORD_SUFFIX}")))
    return prune_entries(
        (entry for entry in found if entry is not None), keep, spare=spare, in_use=IN_USE
    )
