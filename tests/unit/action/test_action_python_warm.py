"""The python session's warm-up cell, against a stand-in kernel: what it sends, and that a
kernel failing it never fails the warm-up (the first call then starts a fresh kernel)."""

import queue
from typing import Any

import pytest

from agentroll.runtime.action import ipython
from agentroll.runtime.action.ipython import PythonSession


class StandInKernel:
    """The kernel manager and client a session drives: records executions; answers each with
    `idle` after `busy_polls` empty polls, or never when it is dead."""

    def __init__(self, *, alive: bool = True, busy_polls: int = 0) -> None:
        self.alive = alive
        self.busy_polls = busy_polls
        self.executed: list[tuple[str, dict[str, Any]]] = []
        self.shut_down = False
        self.provisioner = type("Provisioner", (), {"pid": None})()
        self._iopub: list[dict[str, Any]] = []

    def execute(self, code: str, **options: Any) -> str:
        msg_id = f"m{len(self.executed)}"
        self.executed.append((code, options))
        idle = {"msg_type": "status", "content": {"execution_state": "idle"}}
        self._iopub.append({**idle, "parent_header": {"msg_id": msg_id}})
        return msg_id

    async def get_iopub_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        if not self.alive or self.busy_polls > 0 or not self._iopub:
            self.busy_polls -= 1
            raise queue.Empty
        return self._iopub.pop(0)

    async def get_shell_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        return {"parent_header": {"msg_id": f"m{len(self.executed) - 1}"}}

    async def is_alive(self) -> bool:
        return self.alive

    def stop_channels(self) -> None:
        pass

    async def shutdown_kernel(self, now: bool) -> None:
        self.shut_down = True

    async def cleanup_resources(self) -> None:
        pass


def session_with(kernel: StandInKernel, monkeypatch: pytest.MonkeyPatch) -> PythonSession:
    session = PythonSession(workdir="/", state_dir="/nonexistent", children=None)  # type: ignore[arg-type]

    async def start() -> None:
        session._km = session._kc = kernel

    monkeypatch.setattr(session, "_start", start)
    return session


async def test_warm_up_runs_one_cell_that_leaves_no_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernel = StandInKernel()
    session = session_with(kernel, monkeypatch)
    await session.start()
    assert kernel.executed == [("pass", {"silent": False, "store_history": False})]
    assert session.started
    await session.start()  # already up: no second cell
    assert len(kernel.executed) == 1


async def test_a_kernel_that_dies_in_its_warm_up_cell_is_dropped_without_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernel = StandInKernel(alive=False)
    monkeypatch.setattr(ipython, "LIVENESS_POLL_S", 0.01)
    session = session_with(kernel, monkeypatch)
    await session.start()
    assert kernel.shut_down and not session.started  # the first call starts a fresh one


async def test_a_warm_up_cell_past_the_start_time_leaves_the_kernel_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernel = StandInKernel(busy_polls=10**9)
    monkeypatch.setattr(ipython, "START_TIMEOUT_S", 0.05)
    session = session_with(kernel, monkeypatch)
    await session.start()
    assert session.started and not kernel.shut_down
