"""A verifiers task's `vf.Toolset` tools, offered to the policy and run in a verifiers worker.

verifiers serves a task's toolsets as MCP servers per rollout; a plain one (not colocated in
the agent's runtime, no container, no URL, no `State` synced through the rollout) runs as a
subprocess on verifiers' host. Here that host is the environment's confined worker
(`worker.py`): the policy's arguments reach the tool code only there, never the server's
process. A toolset verifiers would serve in a box of its own (a container runtime, colocated
in the agent's runtime) runs in the rollout's own sandbox instead (`sandbox_tools`). The
schemas are verifiers' own (MCP's, from the tools' signatures), named as verifiers' harness
names them, `<server>_<tool>`; they depend on the task type and its config
only, so they are asked once per environment and server process (`describe`, which also tells
whether the taskset's own `vf.Env` drives the turns: `episodes`).

Whose fault a failure is: a tool that raises on the model's call answers the model with its
error (what an MCP tool error shows it: the policy's doing, the rollout goes on), and so does
whatever fails once the toolsets are set up (their teardown after the call included); a call that
runs past the loop's `tool_timeout_s` or kills its worker is an invalid call the model is told
of, and the worker is replaced; toolsets that cannot set up are infra_error
`verifiers_load_failed`; a worker that cannot start, infra_error `verifiers_worker_unavailable`.
"""

import json
from pathlib import Path
from typing import Any, NamedTuple

from agentroll.handlers.agent import Tool
from agentroll.handlers.builtin.verifiers_env.workers import asked, load_failure
from agentroll.handlers.errors import InfraError, VerifiersWorkerFailure
from agentroll.runtime import Sandbox
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.server.schema.messages import ToolSpec

TOOLS_TIMEOUT_S = 120.0


class Described(NamedTuple):
    tools: list[ToolSpec]
    """The OpenAI function schemas of the task's toolsets ([] for a task without tools)."""
    turns: bool
    """Whether the taskset's own `vf.Env` drives the policy's turns."""
    sandboxed: list[str]
    """The tools whose toolset runs in the rollout's sandbox (`sandbox_tools`)."""


_described: dict[tuple[Path, str], Described] = {}
"""By interpreter and environment (taskset config): asked once per process."""


def _answered(reply: dict[str, Any]) -> dict[str, Any]:
    if not reply.get("ok"):
        raise load_failure(reply)
    return reply


async def _ask(python: Path, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    return _answered(await asked(python, request, timeout_s))


async def describe(python: Path, taskset: dict[str, Any], task: dict[str, Any]) -> Described:
    """The task's tools, and whether an environment of its own drives its turns."""
    key = (python, json.dumps(taskset, sort_keys=True))
    if key not in _described:
        request = {"op": "tools", "taskset": taskset, "task": task}
        try:
            reply = await _ask(python, request, TOOLS_TIMEOUT_S)
        except VerifiersWorkerFailure as exc:  # before the policy said anything
            raise InfraError(str(exc), cause="verifiers_load_failed") from exc
        _described[key] = Described(reply["tools"], bool(reply["turns"]), reply["sandboxed"])
    return _described[key]


class VerifiersTool(Tool):
    """One tool of the task's toolsets; each call runs in a verifiers worker."""

    def __init__(
        self, python: Path, taskset: dict[str, Any], task: dict[str, Any], spec: ToolSpec
    ) -> None:
        function = spec["function"]
        self.name = function["name"]  # type: ignore[misc]  # per instance: the environment's
        self.description = function.get("description", "")  # type: ignore[misc]
        self.parameters = dict(function.get("parameters") or {"type": "object"})
        self.python, self.taskset, self.task = python, taskset, task

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        request = {
            "op": "call",
            "taskset": self.taskset,
            "task": self.task,
            "name": self.name,
            "arguments": args,
        }
        try:
            reply = await _ask(self.python, request, limit_s)
        except VerifiersWorkerFailure as exc:  # timeout or crashed: on the model's arguments
            raise ActionRequestError(f"the tool call {exc.kind}: {exc}") from exc
        # A tool error is the tool's answer, shown as verifiers' harness shows MCP content.
        return str(reply["text"])[:max_chars]
