"""A Python virtual environment created by code from a pinned lock file, cached by content.

Layout under a cache root::

    NAME-0123456789ab/              the virtual environment
    NAME-0123456789ab/.complete     written last: the environment is whole
    NAME-0123456789ab.install.log   pip's output of the last install
    NAME-0123456789ab.lock.txt      the lock file it was installed from
    .locks/NAME-0123456789ab.lock   flock held while installing or checking

The caller's key hashes everything the install depends on (the lock, what runs after it, the
interpreter's version), so a changed pin is a new folder and an unchanged one is never
reinstalled. A folder without its stamp is a half-finished install (killed, disk full): it is
removed and installed again, under the lock, so two processes setting up at once install once.
Used by the vLLM CPU engine and by verifiers environments.
"""

import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime.images.cache import held

STAMP = ".complete"
LOCK_PLACEHOLDER = "{lock}"
"""In a step's arguments: the path of the lock file."""

Runner = Callable[[list[str], Path, float], Awaitable[None]]
"""Runs one install step (argv, log file, timeout); raises if it fails."""


@dataclass(frozen=True)
class CachedVenv:
    """A finished virtual environment."""

    root: Path
    installed_now: bool
    """False when it was already in the cache."""
    seconds: float

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


@dataclass(frozen=True)
class VenvRecipe:
    """How to create one environment: `name`-`key[:12]` under the cache root."""

    name: str
    key: str
    lock: str
    """The lock file's text: every package pinned, installed with `--no-deps`."""
    pip_steps: Sequence[Sequence[str]] = ()
    """pip arguments run after the lock install (`{lock}` is the lock file's path)."""
    check: str = ""
    """Python source run last in the environment (e.g. `import vllm`): it must work."""

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.key[:12]}"


async def ensure_locked_venv(
    recipe: VenvRecipe, base: Path, *, timeout_s: float, run: Runner
) -> CachedVenv:
    """The environment `recipe` describes under `base`, installed if it is not cached yet."""
    started = time.monotonic()
    venv, log = base / recipe.folder, base / f"{recipe.folder}.install.log"
    async with held(
        base / ".locks" / f"{recipe.folder}.lock", timeout_s=timeout_s + 60.0, what=recipe.folder
    ):
        if (venv / STAMP).exists():
            return CachedVenv(venv, False, time.monotonic() - started)
        if venv.exists():
            shutil.rmtree(venv)  # a half-finished install: its stamp was never written
        log.unlink(missing_ok=True)
        lock_file = base / f"{recipe.folder}.lock.txt"
        lock_file.write_text(recipe.lock)
        deadline = time.monotonic() + timeout_s

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        python = str(venv / "bin" / "python")
        pip = [python, "-m", "pip", "--disable-pip-version-check"]
        await run([sys.executable, "-m", "venv", str(venv)], log, left())
        await run([*pip, "install", "-q", "--no-deps", "-r", str(lock_file)], log, left())
        for step in recipe.pip_steps:
            args = [str(lock_file) if a == LOCK_PLACEHOLDER else a for a in step]
            await run([*pip, *args], log, left())
        if recipe.check:
            await run([python, "-c", recipe.check], log, left())
        (venv / STAMP).write_text(recipe.key + "\n")
    return CachedVenv(venv, True, time.monotonic() - started)
