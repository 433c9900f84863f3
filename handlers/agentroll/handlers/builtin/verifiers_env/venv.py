"""The virtual environment verifiers environments run in, created by code and cached.

verifiers pins packages the server's own environment cannot hold (`mcp==2.0.0`, `openai<3`, a
newer `transformers`), so its environments never run in the server's interpreter: they run in
a virtual environment of their own, installed from a lock of one verifiers release (every
package pinned, `--no-deps`; `Stack`: `verifiers.lock.txt`, 0.4.0, for v1 tasksets,
`verifiers_legacy.lock.txt`, 0.3.1, for legacy environments) plus the environment packages a
job names (installed with their dependencies, constrained by the lock so none of verifiers'
pins moves), then checked by importing that release's stack. One folder per lock and package
list (`agentroll.runtime.locked_venv`), under `$AGENTROLL_VERIFIERS_CACHE` (default
/var/tmp/agentroll-verifiers). A package given as a local folder is keyed by its files'
content, so an edited one is installed afresh. The cache keeps the newest
`$AGENTROLL_VERIFIERS_KEEP` copies of each environment (`venv_cache`; each stack's copies are
a lineage of their own).
"""

import asyncio
import hashlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentroll.handlers.builtin.verifiers_env import venv_cache
from agentroll.handlers.errors import VerifiersSetupError
from agentroll.runtime.images.cache import cache_key
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import run_logged
from agentroll.runtime.locked_venv import (
    LOCK_PLACEHOLDER,
    STAMP,
    CachedVenv,
    VenvRecipe,
    ensure_locked_venv,
)
from agentroll.runtime.settings import cache_settings

log = logging.getLogger(__name__)

CACHE_ENV = "AGENTROLL_VERIFIERS_CACHE"
DEFAULT_CACHE_ROOT = Path("/var/tmp/agentroll-verifiers")
INSTALL_TIMEOUT_S = 1200.0
SKIPPED_DIRS = frozenset({"__pycache__", ".git", "build", "dist", ".venv"})


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


@dataclass(frozen=True)
class Stack:
    """One verifiers release's environment: its lock and what must import in it."""

    name: str
    lock: str
    check: str


V1 = Stack("verifiers", "verifiers.lock.txt", "import verifiers.v1")
LEGACY = Stack("verifiers-legacy", "verifiers_legacy.lock.txt", "import verifiers.legacy")


def lock_text(stack: Stack = V1) -> str:
    return resources.files(__package__).joinpath(stack.lock).read_text()


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not SKIPPED_DIRS.intersection(relative.parts):
            if any(part.endswith(".egg-info") for part in relative.parts):
                continue
            digest.update(f"{relative}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def requirement_identity(requirement: str) -> str:
    """What the cache key holds for one package: a local folder's content, else the text."""
    path = Path(requirement)
    if path.is_absolute() and path.is_dir():
        return f"{requirement}@{_folder_digest(path)}"
    return requirement


def recipe(packages: Sequence[str], stack: Stack = V1) -> VenvRecipe:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    identities = sorted(requirement_identity(p) for p in packages)
    lock = lock_text(stack)
    key = cache_key(
        "verifiers-venv",
        {"lock": lock, "packages": "\n".join(identities), "python": version},
    )
    steps = [("install", "-q", "-c", LOCK_PLACEHOLDER, *sorted(packages))] if packages else []
    return VenvRecipe(stack.name, key, lock, steps, check=stack.check)


async def _run(args: list[str], log: Path, timeout_s: float) -> None:
    try:
        await run_logged(args, log_path=log, timeout_s=timeout_s)
    except (BuildFailed, BuildTimeout) as exc:
        raise VerifiersSetupError(f"{' '.join(args[:5])} ...: {exc}") from None


_ready: dict[tuple[Path, Stack, tuple[str, ...]], CachedVenv] = {}
"""Environments this process found whole, by cache root and package list: a rollout does not
hash a local package's files again (a folder edited while the server runs is installed afresh
by the next server, or by `ensure_verifiers_venv` in a process of its own)."""


async def ensure_verifiers_venv(
    packages: Sequence[str],
    root: Path | None = None,
    *,
    timeout_s: float = INSTALL_TIMEOUT_S,
    stack: Stack = V1,
) -> CachedVenv:
    """The environment holding `stack`'s verifiers and `packages` (pip requirements: names,
    pins, or absolute paths of local folders), installed if it is not cached yet."""
    base = root or cache_root()
    known = (base, stack, tuple(sorted(packages)))
    ready = _ready.get(known)
    if ready is not None and (ready.root / STAMP).exists():
        return CachedVenv(ready.root, False, 0.0)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # a copy evicted between its install check and our hold: once more
        venv = await ensure_locked_venv(
            recipe(packages, stack), base, timeout_s=timeout_s, run=_run
        )
        if await asyncio.to_thread(venv_cache.hold, base, venv.root, packages):
            break
    else:
        raise VerifiersSetupError(f"{venv.root} was evicted as soon as it was installed, twice")
    if venv.installed_now:
        keep = cache_settings().verifiers_keep
        report = await asyncio.to_thread(venv_cache.prune_copies, base, keep, spare=venv.root.name)
        for name, size in report.removed:
            log.info("verifiers environments: evicted %s (%d bytes)", name, size)
    _ready[known] = venv
    return venv
