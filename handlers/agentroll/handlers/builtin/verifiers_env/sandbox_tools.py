"""A verifiers task's sandboxed toolsets: served in the rollout's own sandbox.

verifiers serves a toolset that declares a container runtime (`DockerConfig`, `PodmanConfig`,
`ApptainerConfig`) or runs colocated in the agent's runtime in a box apart from its own host,
one server per rollout; here that box is the rollout's own sandbox, started in INIT: the
host's system root read-only (standing in for verifiers' default image, `python:3.11-slim`: a
toolset naming another image is refused, `worker_env.toolset_problems`), the environment's
virtual environment, its base interpreter and agentroll's scripts read-only, a writable
working directory, `/app` (verifiers' default; a runtime naming another is refused), no
network. INIT starts the toolsets' server there (`sandbox_call.py`), which sets them up once
for the rollout, as verifiers' server does; each call is one small client process in the
sandbox asking it (`CLIENT`). What a tool does (a file written, a process started, its
toolset's own state) stays in that sandbox for the rollout's later calls, and dies with it at
the rollout's end. Toolsets verifiers runs on its own host stay in the confined worker
(`tools`).

Whose fault a failure is: the sandboxed toolsets set up in INIT, before the policy acts, and
fail there as infra_error `verifiers_load_failed`; once the policy has acted, a call that fails
(the tool raising, the server gone, the call overrunning `tool_timeout_s`) is the call's: the
policy reads why and the rollout goes on; the sandbox itself failing (before or under a
call: a failed call is followed by a plain command there, which tells) is infra_error
`sandbox_failure`.
"""

import json
from pathlib import Path
from typing import Any

from agentroll.handlers.agent.handler import DEFAULT_LIMITS
from agentroll.handlers.builtin.grader_launch import isolated_script, isolated_source
from agentroll.handlers.builtin.verifiers_env.confine import base_prefix
from agentroll.handlers.builtin.verifiers_env.tools import VerifiersTool
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox, SandboxSpec
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.base import Bind, ExecResult

SCRIPT = Path(__file__).with_name("sandbox_call.py")
WORKDIR = "/app"
"""verifiers' container working directory (`worker_env.SANDBOX_WORKDIR`)."""
SOCKET = "/tmp/verifiers-tools.sock"
"""Where the server listens in the sandbox (`sandbox_call.SOCKET`)."""
START_TIMEOUT_S = 120.0
CONTROL_TIMEOUT_S = 30.0
MAX_ERROR_CHARS = 2_000

CLIENT = """
import socket, sys, time
path, wait_s = sys.argv[1], float(sys.argv[2])
request = sys.stdin.buffer.read()
deadline = time.monotonic() + wait_s
while True:
    try:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        break
    except OSError:
        conn.close()
        if time.monotonic() >= deadline:
            sys.exit("the toolsets' server is not running")
        time.sleep(0.1)
conn.sendall(request + b"\\n")
while chunk := conn.recv(1 << 16):
    sys.stdout.buffer.write(chunk)
"""
"""One request to the toolsets' server, from inside the sandbox; `wait_s`: how long the server
may take to listen (INIT's check waits for it to start; a call does not)."""


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


def _ending(result: ExecResult) -> str:
    how = "timed out" if result.timed_out else f"ended with exit code {result.exit_code}"
    return f"{how}: {result.stderr.strip()[-MAX_ERROR_CHARS:]}"


async def ask(
    sandbox: Sandbox, python: Path, request: dict[str, Any], timeout_s: float, wait_s: float = 0
) -> dict[str, Any]:
    """The server's reply to `request`; `ActionRequestError` where none came (the server gone,
    or the request overran `timeout_s`)."""
    argv = isolated_source(str(python), CLIENT, [SOCKET, str(wait_s)])
    result = await sandbox.exec(argv, timeout=timeout_s, input=json.dumps(request).encode())
    try:
        reply = json.loads(result.stdout)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or result.exit_code != 0:
        raise ActionRequestError(f"the tool call {_ending(result)}"[: MAX_ERROR_CHARS + 100])
    return reply


async def start_toolsets(
    sandbox: Sandbox,
    python: Path,
    taskset: dict[str, Any],
    task: dict[str, Any],
    timeout_s: float = START_TIMEOUT_S,
) -> None:
    """The toolsets' server started in `sandbox`, the toolsets set up there before the policy
    acts (a failure is the environment's: infra_error `verifiers_load_failed`)."""
    start = json.dumps({"taskset": taskset, "task": task}).encode()
    launched = await sandbox.exec(
        isolated_script(str(python), str(SCRIPT)), timeout=timeout_s, input=start
    )
    try:
        if launched.exit_code != 0:
            raise ActionRequestError(f"its server did not start: {_ending(launched)}")
        reply = await ask(sandbox, python, {"op": "check"}, timeout_s, wait_s=timeout_s)
    except ActionRequestError as exc:
        reply = {"error": str(exc)}
    if not reply.get("ok"):
        raise InfraError(
            f"the toolsets did not set up in the rollout's sandbox: {reply.get('error')}"[:4000],
            cause="verifiers_load_failed",
        )


async def open_tool_sandbox(
    ctx: RolloutContext, python: Path, taskset: dict[str, Any], task: dict[str, Any]
) -> None:
    """INIT: the rollout's sandbox, its toolsets' server started there (`start_toolsets`)."""
    sandbox = await ctx.open_sandbox(sandbox_spec(python, ctx.job_id))
    timeout_s = min(START_TIMEOUT_S, max(1.0, ctx.time_left()))
    await start_toolsets(sandbox, python, taskset, task, timeout_s)


class SandboxedTool(VerifiersTool):
    """One tool of a sandboxed toolset; each call asks the server in the rollout's sandbox."""

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        if sandbox is None:  # INIT opens it whenever a tool is sandboxed
            raise InfraError("a sandboxed tool was called without the rollout's sandbox")
        request = {"op": "call", "name": self.name, "arguments": args}
        try:
            reply = await ask(sandbox, self.python, request, limit_s)
        except ActionRequestError:
            # The control: a sandbox that died under the call is no call's doing (it raises
            # `SandboxError` here: infra_error); one that still runs commands leaves the
            # failure with the call.
            await sandbox.exec(["true"], timeout=CONTROL_TIMEOUT_S)
            raise
        return str(reply.get("text", ""))[:max_chars]
