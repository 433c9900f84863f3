"""The engine's set-up steps and its server process own everything they start: a step that
runs past its time or is cancelled takes its children down with it, and a start that fails
says why, whatever an earlier start wrote to the same log."""

import asyncio
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentroll.server.engine import EngineSetupError
from agentroll.server.engine import environment as env_module
from agentroll.server.engine.vllm_server import EngineStartError, VLLMServer
from agentroll.testing import tiny_model

# A step that leaves a child of its own running, as `python -m venv` does with ensurepip.
FORKING_STEP = 'sleep 300 & echo $! > "$0"; wait'


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _is_our_sleeper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read() == b"sleep\x00300\x00"
    except FileNotFoundError:
        return False


@pytest.fixture
def child_pid_file(tmp_path: Path) -> Iterator[Path]:
    pid_file = tmp_path / "child.pid"
    yield pid_file
    pid = _written_pid(pid_file)
    if pid is not None and _alive(pid) and _is_our_sleeper(pid):  # left behind by a failure
        os.kill(pid, signal.SIGKILL)


def _written_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


async def _child(pid_file: Path) -> int:
    async with asyncio.timeout(30):
        while (pid := _written_pid(pid_file)) is None:
            await asyncio.sleep(0.05)
    return pid


async def _gone(pid: int) -> bool:
    async with asyncio.timeout(30):  # SIGTERM then reaping by init: not instantaneous
        while _alive(pid):
            await asyncio.sleep(0.1)
    return True


async def test_a_setup_step_past_its_time_takes_its_children_with_it(
    tmp_path: Path, child_pid_file: Path
) -> None:
    step = env_module._run(
        ["sh", "-c", FORKING_STEP, str(child_pid_file)], tmp_path / "install.log", timeout_s=2.0
    )
    with pytest.raises(EngineSetupError, match="ran past 2 s"):
        await step
    assert await _gone(await _child(child_pid_file))


async def test_a_cancelled_setup_step_takes_its_children_with_it(
    tmp_path: Path, child_pid_file: Path
) -> None:
    step = asyncio.ensure_future(
        env_module._run(
            ["sh", "-c", FORKING_STEP, str(child_pid_file)], tmp_path / "install.log", 600.0
        )
    )
    pid = await _child(child_pid_file)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert await _gone(pid)


async def test_a_failed_setup_step_names_its_exit_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    with pytest.raises(EngineSetupError, match=r"(?s)exited.*3.*no such wheel"):
        await env_module._run(["sh", "-c", "echo no such wheel; exit 3"], log, 30.0)


def _fake_engine(tmp_path: Path, script: str) -> Path:
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_a_start_that_fails_is_not_retried_for_an_earlier_runs_port_clash(
    tmp_path: Path,
) -> None:
    log = tmp_path / "engine.log"
    log.write_text("OSError: [Errno 98] Address already in use\n")  # yesterday's run
    engine = VLLMServer(
        _fake_engine(tmp_path, "echo 'ModuleNotFoundError: vllm'; exit 1"),
        tmp_path,
        log,
        start_timeout_s=60.0,
    )
    with pytest.raises(EngineStartError, match=r"exited with 1 while starting(.|\n)*vllm"):
        engine.start()
    assert log.read_text().count("ModuleNotFoundError") == 1  # started once, not three times


def test_a_port_clash_in_this_start_is_still_retried(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    engine = VLLMServer(
        _fake_engine(tmp_path, "echo 'OSError: [Errno 98] Address already in use'; exit 1"),
        tmp_path,
        log,
        start_timeout_s=60.0,
    )
    with pytest.raises(EngineStartError, match="found no free port in 3 tries"):
        engine.start()
    assert log.read_text().count("Address already in use") == 3


async def test_a_tiny_model_build_past_its_time_takes_its_children_with_it(
    tmp_path: Path, child_pid_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tiny_model, "BUILD_TIMEOUT_S", 2.0)
    python = _fake_engine(tmp_path, f"sleep 300 & echo $! > {child_pid_file}; wait")
    with pytest.raises(EngineSetupError, match="ran past 2 s"):
        async with asyncio.timeout(60):  # a child holding the build's output open: no hang
            await tiny_model.build_tiny_model(python, root=tmp_path / "cache")
    assert await _gone(await _child(child_pid_file))
    assert not list((tmp_path / "cache" / "models").glob("tiny-qwen2-*"))  # nothing half-built


async def test_a_failed_tiny_model_build_says_why(tmp_path: Path) -> None:
    python = _fake_engine(tmp_path, "echo 'torch: no such module'; exit 1")
    with pytest.raises(EngineSetupError, match=r"(?s)tiny-qwen2-.*no such module"):
        await tiny_model.build_tiny_model(python, root=tmp_path / "cache")


def test_workers_outliving_an_engine_that_died_while_starting_are_stopped(
    tmp_path: Path, child_pid_file: Path
) -> None:
    """The engine leaves a worker in its group and exits: the failed start stops the worker
    (signalled while the dead leader is still unreaped, so the group id is still ours)."""
    script = f"sleep 300 & echo $! > {child_pid_file}; echo 'RuntimeError: boom'; exit 1"
    engine = VLLMServer(
        _fake_engine(tmp_path, script), tmp_path, tmp_path / "engine.log", start_timeout_s=60.0
    )
    with pytest.raises(EngineStartError, match="exited with 1 while starting"):
        engine.start()
    worker = _written_pid(child_pid_file)
    assert worker is not None
    assert engine.popen is None
    # Signalled before start() returned; it dies as soon as it is scheduled.
    assert asyncio.run(_gone(worker))
