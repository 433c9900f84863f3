"""How a verifiers worker starts and scores its first reply: a real worker of the fixture
taskset (`tests/fixtures/verifiers_env_pkg`), confined as the server confines it.

Its interpreter runs without `-E` (so that its malloc settings reach it), so nothing but what
agentroll sets may reach it from the server's environment; its heap sits in huge pages where
the kernel offers them (a fork per scoring then copies a fraction of the page tables); and the
scoring it runs once itself before its first child, on an empty reply, never stands in for the
reply's own scoring, even where the reward code fails on every reply."""

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.handlers.verifiers_reference import PACKAGE

from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.confine import THP_SETTINGS
from agentroll.handlers.builtin.verifiers_env.workers import (
    FORK_FRIENDLY_ENV,
    WORKER_SCRIPT,
    VerifiersWorkers,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

TASKSET = {"id": "agentroll-vf-echo"}
GENEROUS_S = 120.0
"""A bound no scoring of the echo taskset comes near, even on a loaded node."""


@pytest.fixture
async def python() -> Path:
    return (await ensure_verifiers_venv([PACKAGE])).python


@pytest.fixture
async def workers() -> AsyncIterator[VerifiersWorkers]:
    pool = VerifiersWorkers(size=1)
    try:
        yield pool
    finally:
        await pool.shutdown()


async def tasks(workers: VerifiersWorkers, python: Path) -> dict[str, dict[str, Any]]:
    reply = await workers.ask(python, {"op": "tasks", "taskset": TASKSET}, GENEROUS_S)
    assert reply["ok"], reply
    return {t["data"]["id"]: t["data"] for t in reply["tasks"]}


def score_request(task: dict[str, Any], reply: str) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": task["prompt"]},
        {"role": "assistant", "content": reply},
    ]
    return {"op": "score", "taskset": TASKSET, "task": task, "messages": messages, "sampled": [1]}


def proc_fields(pid: int, name: str) -> list[str]:
    """`/proc/PID/NAME`'s NUL-separated fields (its `environ`, its `cmdline`)."""
    return Path(f"/proc/{pid}/{name}").read_bytes().decode().split("\0")


def huge_pages_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as smaps:
        return next(int(line.split()[1]) for line in smaps if line.startswith("AnonHuge"))


def interpreter_pid(workers: VerifiersWorkers) -> int:
    """The one worker's Python process, under the shell and bubblewrap that start it."""
    (root,) = workers.worker_pids
    pending, seen = [root], []
    while pending:
        pid = pending.pop()
        seen.append(pid)
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/children") as children:
                pending += [int(c) for c in children.read().split()]
    running = [p for p in seen if WORKER_SCRIPT in proc_fields(p, "cmdline")]
    (pid,) = [p for p in running if Path(f"/proc/{p}/exe").resolve().name.startswith("python")]
    return pid


async def test_nothing_of_the_servers_environment_reaches_the_worker(
    workers: VerifiersWorkers, python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # attack: without `-E`, a `PYTHON*` variable of the server's (a module path, a startup
    # file) would take part in the interpreter that runs the reward code
    (tmp_path / "startup.py").write_text("raise SystemExit('the startup file ran')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTHONSTARTUP", str(tmp_path / "startup.py"))
    monkeypatch.setenv("PYTHONINSPECT", "1")

    assert "echo-0" in await tasks(workers, python)
    pid = interpreter_pid(workers)
    names = {entry.partition("=")[0] for entry in proc_fields(pid, "environ") if entry}
    assert names == {"PATH", "HOME", "PWD", *FORK_FRIENDLY_ENV}
    # no user site-packages, not the script's folder on the import path
    assert proc_fields(pid, "cmdline")[1:3] == ["-s", "-P"]


async def test_the_workers_heap_sits_in_huge_pages_where_the_kernel_offers_them(
    workers: VerifiersWorkers, python: Path
) -> None:
    enabled = THP_SETTINGS / "enabled"
    if not enabled.exists() or "[never]" in enabled.read_text():
        pytest.skip("this kernel offers no transparent huge pages")
    task = (await tasks(workers, python))["echo-0"]
    reply = await workers.ask(python, score_request(task, "42"), GENEROUS_S)
    assert reply["ok"], reply
    assert huge_pages_kb(interpreter_pid(workers)) > 0


async def test_a_first_scoring_is_the_replys_own_even_where_the_reward_fails_on_every_reply(
    workers: VerifiersWorkers, python: Path
) -> None:
    by_id = await tasks(workers, python)

    # control: the right answer, scored first in a fresh worker, earns both rewards
    right = await workers.ask(python, score_request(by_id["echo-0"], "42"), GENEROUS_S)
    assert right["rewards"] == {
        "correct": {"score": 1.0, "weight": 1.0},
        "brief": {"score": 1.0, "weight": 0.5},
    }
    assert right["metrics"] == {"reply_chars": 2.0}

    # the task whose reward code fails on every reply (the empty one of the worker's own first
    # scoring too): its failure is the reply's scoring's, reported as such, not a load failure
    # and not a dead worker
    await workers.shutdown()
    fresh = VerifiersWorkers(size=1)
    try:
        broken = await fresh.ask(python, score_request(by_id["echo-6"], "3"), GENEROUS_S)
        again = await fresh.ask(python, score_request(by_id["echo-0"], "41"), GENEROUS_S)
    finally:
        await fresh.shutdown()
    assert broken["ok"] is False
    assert broken["stage"] == "score"
    assert broken["error"] == "RuntimeError: this task's reward code is broken"
    assert again["rewards"]["correct"] == {"score": 0.0, "weight": 1.0}
