"""A verifiers task's sandboxed toolsets: run in the rollout's own sandbox.

verifiers serves a toolset that declares a container runtime (`DockerConfig`, `PodmanConfig`,
`ApptainerConfig`) or runs colocated in the agent's runtime in a box apart from its own host,
one per rollout; here that box is the rollout's own sandbox, started in INIT: the host's
system root read-only (standing in for verifiers' default image, `python:3.11-slim`: a
toolset naming another image is refused, `worker_env.toolset_problems`), the environment's
virtual environment, its base interpreter and agentroll's scripts read-only, a writable
working directory, `/app` (verifiers' default; a runtime naming another is refused), no
network.
Each call runs `sandbox_call.py` there in a process of its own, its toolsets set up afresh:
what the tool does (a file written, a process started) stays in that sandbox, where the
rollout's later calls see it, and dies with it at the rollout's end. Toolsets verifiers runs
on its own host stay in the confined worker (`tools`).

Whose fault a failure is: the sandboxed toolsets are set up once in INIT, before the policy
acts, and fail there as infra_error `verifiers_load_failed`; once the policy has acted, a call
that fails (the tool raising, or its process dying or overrunning `tool_timeout_s`) is the
call's: the policy reads why and the rollout goes on; the sandbox itself failing is
infra_error `sandbox_failure`.
"""

import json
from pathlib import Path
from typing import Any

from agentroll.handlers.agent.handler import DEFAULT_LIMITS
from agentroll.handlers.builtin.grader_launch import isolated_script
from agentroll.handlers.builtin.verifiers_env.confine import base_prefix
from agentroll.handlers.builtin.verifiers_env.tools import VerifiersTool
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox, SandboxSpec
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.base import Bind, ExecResult

SCRIPT = Path(__file__).with_name("sandbox_call.py")
LOG = "/tmp/verifiers-tools.log"
"""Where `sandbox_call.py` sends what the tools print, in the sandbox (its `LOG`)."""
WORKDIR = "/app"
"""verifiers' container working directory (`worker_env.SANDBOX_WORKDIR`)."""
CHECK_TIMEOUT_S = 120.0
MAX_ERROR_CHARS = 2_000


def sandbox_spec(python: Path, job_id: str) -> SandboxSpec:
    """The rollout's sandbox for its toolsets: the environment's interpreter and agentroll's
    scripts (`sandbox_call.py` loads its siblings and the grading helpers) read-only."""
    shown = {python.parent.parent, base_prefix(python), SCRIPT.parent.parent}
    return SandboxSpec(
        binds=tuple(Bind(host=path, dest=str(path)) for path in sorted(shown)),
        env={"HOME": "/tmp", "PATH": "/usr/bin:/bin"},
        limits=DEFAULT_LIMITS,
        workdir=WORKDIR,
        label=job_id,
    )


async def _run(
    sandbox: Sandbox, python: Path, request: dict[str, Any], timeout_s: float
) -> tuple[dict[str, Any] | None, ExecResult]:
    """`sandbox_call.py`'s reply to `request` (None where it gave none), and how it ended."""
    argv = isolated_script(str(python), str(SCRIPT))
    result = await sandbox.exec(argv, timeout=timeout_s, input=json.dumps(request).encode())
    try:
        reply = json.loads(result.stdout)
    except ValueError:
        return None, result
    return (reply if isinstance(reply, dict) else None), result


def _ending(result: ExecResult) -> str:
    how = "timed out" if result.timed_out else f"ended with exit code {result.exit_code}"
    shown = result.stderr.strip()[-MAX_ERROR_CHARS:] or f"its output is in {LOG} there"
    return f"{how}: {shown}"


async def open_tool_sandbox(
    ctx: RolloutContext, python: Path, taskset: dict[str, Any], task: dict[str, Any]
) -> None:
    """INIT: the rollout's sandbox, its toolsets set up there once before the policy acts
    (a failure is the environment's: infra_error `verifiers_load_failed`)."""
    sandbox = await ctx.open_sandbox(sandbox_spec(python, ctx.job_id))
    request = {"op": "check", "taskset": taskset, "task": task}
    reply, result = await _run(sandbox, python, request, min(CHECK_TIMEOUT_S, ctx.time_left()))
    if reply is None or not reply.get("ok"):
        why = reply["error"] if reply is not None else _ending(result)
        raise InfraError(
            f"the toolsets did not set up in the rollout's sandbox: {why}"[:4000],
            cause="verifiers_load_failed",
        )


class SandboxedTool(VerifiersTool):
    """One tool of a sandboxed toolset; each call runs in the rollout's sandbox."""

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        if sandbox is None:  # INIT opens it whenever a tool is sandboxed
            raise InfraError("a sandboxed tool was called without the rollout's sandbox")
        request = {
            "op": "call",
            "taskset": self.taskset,
            "task": self.task,
            "name": self.name,
            "arguments": args,
        }
        reply, result = await _run(sandbox, self.python, request, limit_s)
        if reply is None:  # its process died or overran on the model's arguments
            raise ActionRequestError(f"the tool call {_ending(result)}"[: max(max_chars, 200)])
        return str(reply.get("text", ""))[:max_chars]
