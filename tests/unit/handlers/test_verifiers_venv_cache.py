"""The verifiers environments cache keeps the newest copies of each environment, never one a
live server set up. Real folders and real flocks; a server is a child process that holds its
copy as the real one does. pip is replaced by a step that only makes the folder (a real
install is ~570 MB; tests/integration/handlers runs the real one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentroll.handlers.builtin.verifiers_env import venv as venv_module
from agentroll.handlers.builtin.verifiers_env import venv_cache
from agentroll.runtime.locked_venv import STAMP

SERVER = r"""
import asyncio, os, sys, time
from pathlib import Path
from agentroll.handlers.builtin.verifiers_env import venv as v

async def make_folder(args, log, timeout_s):
    with open(log, "a") as out:
        out.write(" ".join(args) + "\n")
    if "venv" in args:
        os.makedirs(os.path.join(args[-1], "bin"))

v._run = make_folder
v.lock_text = lambda stack=v.V1: sys.argv[2]
print(asyncio.run(v.ensure_verifiers_venv(sys.argv[3:], Path(sys.argv[1]))).root, flush=True)
time.sleep(600)
"""


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def serve(
    base: Path, lock: str, packages: list[str], started: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], Path]:
    """A server process that set up (lock, packages) under `base` and stays alive."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(base), lock, *packages],
        stdout=subprocess.PIPE,
        text=True,
    )
    started.append(proc)
    assert proc.stdout is not None
    root = proc.stdout.readline().strip()
    assert root, f"the server did not set up (exit {proc.poll()})"
    return proc, Path(root)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)  # a crash: nothing is released by hand
    proc.wait(timeout=30)


def copy_files(base: Path, venv: Path) -> list[str]:
    names = [f"{venv.name}{side}" for side in (".install.log", ".lock.txt", ".env.json")]
    names += [f".locks/{venv.name}.lock", f".locks/{venv.name}.use"]
    return [name for name in names if (base / name).exists()]


async def test_a_new_install_evicts_older_copies_of_its_environment_only(
    tmp_path: Path, servers: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTROLL_VERIFIERS_KEEP", "1")
    first, old = serve(tmp_path, "verifiers==0.1\n", ["pkg-a"], servers)
    other, other_env = serve(tmp_path, "verifiers==0.1\n", ["pkg-b"], servers)
    assert (old / STAMP).exists() and len(copy_files(tmp_path, old)) == 5
    stop(first)
    stop(other)
    (old / "payload").write_bytes(b"x" * 50_000)

    async def make_folder(args: list[str], log: Path, timeout_s: float) -> None:
        with log.open("a") as out:
            out.write(" ".join(args) + "\n")
        if "venv" in args:
            os.makedirs(os.path.join(args[-1], "bin"))

    monkeypatch.setattr(venv_module, "_run", make_folder)
    monkeypatch.setattr(venv_module, "lock_text", lambda stack=venv_module.V1: "verifiers==0.2\n")
    new = await venv_module.ensure_verifiers_venv(["pkg-a"], tmp_path)
    assert new.installed_now and new.root != old
    assert not old.exists() and copy_files(tmp_path, old) == []
    assert (other_env / STAMP).exists()  # another package list: another environment
    assert (new.root / STAMP).exists() and len(copy_files(tmp_path, new.root)) == 5


def test_a_copy_a_live_server_set_up_is_kept_until_it_dies(
    tmp_path: Path, servers: list[subprocess.Popen[str]]
) -> None:
    older, old = serve(tmp_path, "verifiers==0.1\n", ["pkg-a"], servers)
    newer, new = serve(tmp_path, "verifiers==0.2\n", ["pkg-a"], servers)
    report = venv_cache.prune_copies(tmp_path, 1)
    assert report.removed == [] and report.skipped == [(old.name, "in use by a server")]
    stop(older)
    report = venv_cache.prune_copies(tmp_path, 1)
    assert [name for name, _ in report.removed] == [old.name] and not old.exists()
    assert (new / STAMP).exists() and newer.poll() is None


def test_copies_rank_by_last_use_and_half_installs_are_left_to_the_installer(
    tmp_path: Path,
) -> None:
    record = json.dumps({"packages": ["pkg-a"], "prefix": "verifiers", "python": "3.11"})
    copies = []
    for n, used in enumerate((300.0, 100.0, 200.0)):
        venv = tmp_path / f"verifiers-{n:012x}"
        (venv / "bin").mkdir(parents=True)
        (venv / STAMP).write_text("key\n")
        (tmp_path / f"{venv.name}.env.json").write_text(record)
        (tmp_path / ".locks").mkdir(exist_ok=True)
        (tmp_path / ".locks" / f"{venv.name}.use").touch()
        os.utime(tmp_path / f"{venv.name}.env.json", (used, used))
        os.utime(tmp_path / ".locks" / f"{venv.name}.use", (used, used))
        copies.append(venv)
    half = tmp_path / "verifiers-ffffffffffff"
    half.mkdir()
    (tmp_path / f"{half.name}.env.json").write_text(record)
    report = venv_cache.prune_copies(tmp_path, 2)
    assert [name for name, _ in report.removed] == [copies[1].name]
    assert copies[0].exists() and copies[2].exists() and half.exists()
    assert venv_cache.prune_copies(tmp_path, 0).removed == []


def test_hold_is_refused_for_a_copy_eviction_removed(tmp_path: Path) -> None:
    venv = tmp_path / "verifiers-0123456789ab"
    venv.mkdir()
    assert venv_cache.hold(tmp_path, venv, []) is False  # no stamp: not a whole copy
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", venv.name]
    assert list((tmp_path / ".locks").iterdir()) == []  # no record, no lock left behind
