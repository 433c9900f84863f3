"""One request for a task's sandboxed toolsets, run inside the rollout's own sandbox.

verifiers serves a toolset that declares a container runtime (or runs colocated in the agent's
runtime) in a box apart from its own host; agentroll runs it in the rollout's sandbox
(`sandbox_tools`), so what its tools do there (files written, processes started) stays in
that rollout's sandbox and dies with it. The sandbox runs `VENV/bin/python -I sandbox_call.py`
with the environment's virtual environment and this folder bound read-only, one request as
JSON on stdin and the reply as one JSON object on stdout (what the tools print goes to
`/tmp/verifiers-tools.log` there):

    <- {"op": "check", "taskset": {...}, "task": {...}}
    -> {"ok": true, "tools": ["notes_write", ...]}        (set up once, before the policy acts)
    <- {"op": "call", "taskset": {...}, "task": {...}, "name": "notes_write", "arguments": {}}
    -> {"ok": true, "text": "...", "is_error": false}

Whatever a `call` meets is answered as the tool's error text: the policy has acted in this
sandbox by then, and `check` already showed that the toolsets set up. Only `check` fails
(`{"ok": false, "error"}`): that is the environment's.
"""

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any


def _by_path(name: str, path: Path) -> Any:
    """A module of agentroll's, loaded by its file: its folder never joins the import path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOG = "/tmp/verifiers-tools.log"
_worker = _by_path("agentroll_verifiers_worker", Path(__file__).with_name("worker.py"))


async def answer(request: dict[str, Any]) -> dict[str, Any]:
    if request["op"] == "check":
        try:
            task = _worker.load_task(_worker.Environments(), request)
            listed = await _worker._env.tool_schemas(task, "sandbox")
        except Exception as exc:
            return _worker.failed("load", exc)
        return {"ok": True, "tools": [t["function"]["name"] for t in listed["tools"]]}
    try:
        task = _worker.load_task(_worker.Environments(), request)
        args = request["arguments"]
        return await _worker._env.call_tool(task, str(request["name"]), args, "sandbox")
    except Exception as exc:  # after the policy acted in this sandbox: the call's
        return {"ok": True, "text": f"{type(exc).__name__}: {exc}", "is_error": True}


def main() -> None:
    replies = os.fdopen(os.dup(1), "w")  # not inherited: what a tool starts never holds it
    # What the tools print, and what a process they start prints later, goes to a log in the
    # sandbox: never into the reply, and no process left running holds the call's pipes.
    log = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    request = json.loads(sys.stdin.buffer.read())
    reply = asyncio.run(answer(request))
    replies.write(json.dumps(reply))
    replies.flush()


if __name__ == "__main__":
    main()
