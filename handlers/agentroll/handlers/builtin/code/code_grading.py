"""Grading a `code` solution in a sandbox of its own, from channels the solution cannot write.

`grade` starts a fresh sandbox, uploads the solution into a random folder and starts the
runner (`code_runner.py`) from its source on the command line in isolated mode
(`grader_launch`): no file in the sandbox is the runner, and nothing in the solution's folder
is on its import path. It hands the runner the tests and a secret token on stdin (never a
file the solution could read) and keeps only the runner's lines that carry the token.

Whose fault a failed grading is:
- the runner never said it started (no solution code has run yet): `InfraError`;
- it started, never reported, and the sandbox still works: the solution killed, stopped or
  starved it: reward 0, `reason: "grading_disrupted"`;
- the sandbox died: ambiguous. The infrastructure may have lost it, or the solution killed
  every process it could see (the sandbox's own server with them). Grading starts over in a
  new sandbox: a lost sandbox is rare and does not repeat, one the solution takes down dies
  every time. Dead in every attempt after the solution started: reward 0; otherwise the
  sandboxes are being lost before any solution code runs: `InfraError`.
"""

import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentroll.handlers.builtin.grader_launch import isolated_source
from agentroll.handlers.context import Reward
from agentroll.handlers.errors import InfraError
from agentroll.runtime import ExecResult, Sandbox, SandboxError
from agentroll.runtime.action.errors import ActionError
from agentroll.runtime.cpulimit import grading_wall_s

RUNNER_SLACK_S = 30.0
GRADING_ATTEMPTS = 2
LIVENESS_TIMEOUT_S = 30.0


@cache
def runner_source() -> str:
    path = resources.files("agentroll.handlers.builtin.code").joinpath("code_runner.py")
    return path.read_text(encoding="utf-8")


def runner_argv(python: str, folder: str) -> list[str]:
    """The runner, from its own source (never a file), grading the solution in `folder`."""
    return isolated_source(python, runner_source(), [folder])


def runner_spec(token: str, solution_file: str, tests: list[Any], timeout_s: float) -> bytes:
    """What the runner reads on stdin; its source too, for the test processes it starts."""
    spec = {"token": token, "source": runner_source(), "solution_file": solution_file}
    return json.dumps({**spec, "timeout_s": timeout_s, "tests": tests}).encode()


@dataclass(frozen=True, slots=True)
class SandboxLost:
    solution_ran: bool
    detail: str


async def grade(
    open_sandbox: Callable[[], Awaitable[Sandbox]],
    source: str,
    solution_file: str,
    tests: list[Any],
    timeout_s: float,
) -> Reward:
    """Run `tests` against the solution `source` (saved as `solution_file`)."""
    losses: list[SandboxLost] = []
    for _ in range(GRADING_ATTEMPTS):
        sandbox = await open_sandbox()
        try:
            outcome = await _grade_in(sandbox, source, solution_file, tests, timeout_s)
        finally:
            await sandbox.stop()  # now: another attempt may need the room
        if isinstance(outcome, Reward):
            outcome.info["grading_attempts"] = len(losses) + 1
            return outcome
        losses.append(outcome)
    if not all(loss.solution_ran for loss in losses):
        detail = losses[-1].detail
        raise InfraError(f"the grading sandbox was lost: {detail}", cause="sandbox_failure")
    detail = f"the grading sandbox died in each of {GRADING_ATTEMPTS} attempts"
    lost = scored([], len(tests), reason="grading_disrupted", detail=detail)
    lost.info["grading_attempts"] = GRADING_ATTEMPTS
    return lost


async def _grade_in(
    sandbox: Sandbox, source: str, solution_file: str, tests: list[Any], timeout_s: float
) -> Reward | SandboxLost:
    folder = f"/tmp/agentroll-grade-{secrets.token_hex(8)}"
    token = secrets.token_hex(16)
    try:
        await sandbox.upload(f"{folder}/{solution_file}", source.encode())
        limit_s = len(tests) * (timeout_s + 1) + RUNNER_SLACK_S
        done = await sandbox.exec(
            runner_argv("python3", folder),
            input=runner_spec(token, solution_file, tests, timeout_s),
            timeout=grading_wall_s(limit_s),
            cpu_limit_s=limit_s,
        )
    except (SandboxError, ActionError) as exc:  # nothing of the solution has run
        return SandboxLost(False, f"{type(exc).__name__}: {exc}")
    started, final = read_runner_output(done.stdout, token)
    if final is not None:
        return scored(_results(final, len(tests), done), len(tests))
    stopped = "timed out" if done.timed_out else f"exit code {done.exit_code}"
    if not await _still_running(sandbox):
        return SandboxLost(started, f"the sandbox died under the test runner ({stopped})")
    if not started:
        raise InfraError(
            f"the test runner could not start ({stopped}): {done.stderr.strip()[-500:]}",
            cause="test_runner_failed",
        )
    detail = f"the test runner stopped before reporting ({stopped})"
    return scored([], len(tests), reason="grading_disrupted", detail=detail)


async def _still_running(sandbox: Sandbox) -> bool:
    try:
        done = await sandbox.exec(["true"], timeout=LIVENESS_TIMEOUT_S)
    except SandboxError:
        return False
    return done.exit_code == 0


def read_runner_output(stdout: str, token: str) -> tuple[bool, dict[str, Any] | None]:
    """Whether the runner said it started, and its final line: only lines with the token
    count, so nothing a test process writes into the runner's output can pass for them."""
    started, final = False, None
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("started") == token:
            started = True
        elif isinstance(message, dict) and message.get("token") == token:
            final = message
    return started, final


def _results(final: dict[str, Any], count: int, done: ExecResult) -> list[dict[str, Any]]:
    results = final.get("results")
    if (
        isinstance(results, list)
        and len(results) == count
        and all(isinstance(r, dict) and isinstance(r.get("passed"), bool) for r in results)
    ):
        return results
    raise InfraError(
        f"the test runner failed: {final.get('error', final)!s:.500}; {done.stderr.strip()[-300:]}",
        cause="test_runner_failed",
    )


def scored(results: list[dict[str, Any]], total: int, **reason: str) -> Reward:
    """1.0 only if all `total` tests passed; `reason` adds why the tests could not run."""
    passed = sum(1 for r in results if r["passed"])
    info = {"passed": passed, "total": total, "pass_fraction": passed / total, "tests": results}
    return Reward(1.0 if passed == total else 0.0, {**info, **reason})
