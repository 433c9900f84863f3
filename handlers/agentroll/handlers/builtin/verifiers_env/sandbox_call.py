"""A rollout's sandboxed toolsets, served from inside the rollout's own sandbox.

verifiers serves a toolset that declares a container runtime (or runs colocated in the agent's
runtime) in a box apart from its own host, one server for the rollout; agentroll serves it in
the rollout's own sandbox (`sandbox_tools`), so what its tools do there (files written,
processes started) stays in that rollout's sandbox and dies with it. In INIT the sandbox runs
`VENV/bin/python -I sandbox_call.py`, with the environment's virtual environment and this
folder bound read-only and the taskset and task as JSON on stdin; it forks the server and
returns. The server sets the task's sandboxed toolsets up once (`setup`, `setup_task`), as
verifiers' own server does, and answers one JSON request per connection on the unix socket
`SOCKET` until the sandbox is torn down (`CLIENT` in `sandbox_tools` asks it):

    <- {"op": "check"}
    -> {"ok": true, "tools": ["notes_read", ...]} | {"ok": false, "stage": "load", "error"}
    <- {"op": "call", "name": "notes_write", "arguments": {"text": "apple"}}
    -> {"ok": true, "text": "...", "is_error": false}

Only `check`, asked in INIT before the policy acts, reports a failure: toolsets that did not
set up are the environment's. What a call meets is the tool's error text: the policy's
arguments reached it. What the tools print goes to `LOG` in the sandbox, never into a reply.
"""

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

SOCKET = "/tmp/verifiers-tools.sock"
LOG = "/tmp/verifiers-tools.log"


def _by_path(name: str, path: Path) -> Any:
    """A module of agentroll's, loaded by its file: its folder never joins the import path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def serve(request: dict[str, Any]) -> None:
    worker = _by_path("agentroll_verifiers_worker", Path(__file__).with_name("worker.py"))
    failure: dict[str, Any] | None = None
    dispatch: dict[str, Any] = {}
    try:
        task = worker.load_task(worker.Environments(), request)
        served = worker._env.served_tools(task, "sandbox")
        dispatch = await served.__aenter__()  # held for the rollout: the sandbox ends it
    except Exception as exc:
        failure = worker.failed("load", exc)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            asked = json.loads(await reader.readline())
            if asked["op"] == "check":
                reply = failure or {"ok": True, "tools": sorted(dispatch)}
            else:
                reply = await worker._env.call_served(
                    dispatch, str(asked["name"]), asked["arguments"]
                )
        except Exception as exc:  # after the policy acted: the call's
            reply = {"ok": True, "text": f"{type(exc).__name__}: {exc}", "is_error": True}
        writer.write(json.dumps(reply).encode() + b"\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, SOCKET)
    await server.serve_forever()


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    if os.fork():  # the launcher returns at once; the server stays in the sandbox
        os._exit(0)
    os.setsid()
    # What the tools print, and what a process they start prints later, goes to the log:
    # nothing holds the launching call's pipes, and nothing reaches a reply but the reply.
    log = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, source in ((0, null), (1, log), (2, log)):
        os.dup2(source, fd)
    asyncio.run(serve(request))


if __name__ == "__main__":
    main()
