"""A Harbor verifier that failed or was disrupted, blamed by the task's control run.

No reward file, a malformed one, no pytest summary, a test script killed half-way, processes
that outlived it: the tests may be broken, or the agent's code (which they run) may have broken
them. The control decides (`agentroll.handlers.builtin.control`): a fresh sandbox from the same
image, the task's reference solution run in it (`solution/solve.sh` with its folder at
`SOLUTION_DIR`; without one, the untouched environment), then the same verifier, contained the
same way. Cached per task content (every file of the task folder), `reward_key` and prebuilt
`image`.

- The control gets a reward: the verifier works, so the policy's code broke it: reward 0,
  `verifier_disrupted` (it left processes or killed the wrapper) or `verifier_failed_on_answer`.
- The control fails too: infra_error `verifier_failed`, naming both failures.
- The control leaves processes too: the task's own tests leave them (a server they started, say):
  a disrupted run that still wrote its reward keeps that reward.

A control that cannot finish within what EVAL has left (its stage limit and the job's deadline,
which can cut its CPU limit or its wall-clock backstop short) is not kept: this rollout is
`infra_error` (`verifier_control_timeout`), and the next failure runs the control again. Until
a task's control has run once, a policy that leaves EVAL too little time and breaks its
verifier is resampled rather than scored 0: the control runs inside a rollout's own limits.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentroll.handlers.builtin.control import CONTROLS, ControlResult, blamed, content_key
from agentroll.handlers.builtin.harbor.task import DEFAULT_TIMEOUT_S, HarborTask
from agentroll.handlers.builtin.harbor.verify import (
    RUN_RESERVE_S,
    STOP_TIMEOUT_S,
    VerifierFailed,
    folder_files,
    install_files,
    tar_of,
    verify,
)
from agentroll.handlers.context import Reward
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox
from agentroll.runtime.cpulimit import grading_wall_cut_short

SOLUTION_DIR = "/tmp/agentroll-solution"
CONTROL_MARGIN_S = 30.0
"""Deadline time kept for reading the reward and stopping the control's sandbox."""


async def blame(
    time_left: Callable[[], float],
    task: HarborTask,
    failure: VerifierFailed,
    open_control: Callable[[], Awaitable[Sandbox]],
    *,
    reward_key: str,
    image: str | None = None,
    kept: Reward | None = None,
) -> Reward:
    """The verdict on a failed run, or on a disrupted one (`kept`: the reward it read).
    `image`: the prebuilt root filesystem the job named, if any (part of the control's key)."""
    run = kept.info.get("verifier") if kept is not None else None
    if failure.run is not None:
        run = failure.run.info()
    key = content_key("harbor", await asyncio.to_thread(task_digest, task), reward_key, image)
    control = await CONTROLS.result(
        key, lambda: control_run(time_left, task, open_control, reward_key=reward_key)
    )
    tests_leave_processes = bool(control.facts.get("disrupted"))
    if kept is not None and control.passed and tests_leave_processes:
        return kept
    disrupted = run is not None and run["disrupted"] is not None
    reason = (
        "verifier_disrupted"
        if disrupted and not tests_leave_processes
        else "verifier_failed_on_answer"
    )
    info = {"format": task.format, **({"verifier": run} if run is not None else {})}
    return blamed(failure, reason, control, info)


def task_digest(task: HarborTask) -> str:
    """A hash of every file of the task folder (names and contents)."""
    digest = hashlib.sha256()
    for name, path in sorted(folder_files(task.root, task.root).items()):
        digest.update(f"{len(name)}:{name}:{path.stat().st_size}:".encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


async def control_run(
    time_left: Callable[[], float],
    task: HarborTask,
    open_control: Callable[[], Awaitable[Sandbox]],
    *,
    reward_key: str,
) -> ControlResult:
    """The verifier's run on the reference solution (or the untouched environment), within
    `time_left()` (the seconds EVAL has left) less a margin."""
    answer = "untouched environment" if task.solution is None else "reference solution"
    sandbox = await open_control()
    try:
        if task.solution is not None:
            await _solve(time_left, task, sandbox)
        limit = max(1.0, min(task.verifier_timeout_s, time_left() - CONTROL_MARGIN_S))
        # Cut short by the rollout's time (its CPU limit, or the wall-clock backstop the
        # grading stage's end clips): a timeout then says nothing about the task.
        cut_short = limit < task.verifier_timeout_s or grading_wall_cut_short(
            limit, reserve_s=RUN_RESERVE_S
        )
        try:
            reward = await verify(sandbox, task, time_limit=lambda: limit, reward_key=reward_key)
        except VerifierFailed as exc:
            disrupted = exc.run is not None and exc.run.disrupted is not None
            facts = {"answer": answer, "disrupted": disrupted}
            return ControlResult(False, f"on the {answer}: {exc}", facts)
    finally:
        await sandbox.stop()
    run = reward.info["verifier"]
    facts = {"answer": answer, "disrupted": run["disrupted"] is not None}
    if run["timed_out"]:
        if cut_short:
            raise InfraError(
                f"the control's verifier ran out of the rollout's time ({limit:.0f} s of CPU "
                f"time, {run['seconds']:.0f} s of wall time)",
                cause="verifier_control_timeout",
            )
        return ControlResult(False, f"on the {answer}: the verifier timed out", facts)
    return ControlResult(True, f"on the {answer}: reward {reward.value:g}", facts)


async def _solve(time_left: Callable[[], float], task: HarborTask, sandbox: Sandbox) -> None:
    """Run the reference solution in the control's sandbox, then stop what it left."""
    assert task.solution is not None
    solution = task.solution
    made = await sandbox.exec(["mkdir", "-p", SOLUTION_DIR], timeout=STOP_TIMEOUT_S)
    if made.exit_code != 0:
        raise InfraError(f"could not make {SOLUTION_DIR}: {made.stderr[-500:]}")
    await install_files(sandbox, task, lambda t: _solution_archive(t, solution), SOLUTION_DIR)
    limit = max(1.0, min(task.agent_timeout_s or DEFAULT_TIMEOUT_S, time_left() - CONTROL_MARGIN_S))
    script = f"{SOLUTION_DIR}/{solution.name}"
    solved = await sandbox.exec(["bash", "-c", f"bash {script} </dev/null"], timeout=limit)
    if solved.timed_out:
        raise InfraError(
            f"the reference solution did not finish within {limit:.0f} s",
            cause="verifier_control_timeout",
        )
    await sandbox.stop_agent(timeout=STOP_TIMEOUT_S)


def _solution_archive(task: HarborTask, script: Path) -> bytes:
    # Harbor's solution folder; a Terminal-Bench 1 `solution.sh` lies in the task's own.
    files = {} if script.parent == task.root else folder_files(task.root, script.parent)
    files[script.name] = script
    return tar_of(files)
