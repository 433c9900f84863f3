"""verifiers' own scoring of a conversation, for the `verifiers` handler's tests: run by
verifiers itself in the environment's own interpreter, the task from the taskset's `load()`,
the trace built from verifiers' message types (user, assistant with its tool calls, tool)."""

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.conftest import ServerFactory
from tests.integration.handlers.harness import (
    request_log,
    rollout_service,
    run_jobs,
    scripted_backend,
)

from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import default_workers
from agentroll.server.schema import Trajectory
from agentroll.server.serving import RunningServer

PACKAGE = str(Path(__file__).resolve().parents[2] / "fixtures" / "verifiers_env_pkg")

REFERENCE = """
import asyncio, json, sys
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

cases = json.load(sys.stdin)
config = taskset_config_type(sys.argv[1]).model_validate({"id": sys.argv[1]})
tasks = {t.data.id: t for t in taskset_class(sys.argv[1])(config)}
out = {}
for task_id, messages in cases:
    task = tasks[task_id]
    typed = []
    for m in messages:
        if m["role"] == "user":
            typed.append((vf.UserMessage(content=m["content"]), False))
        elif m["role"] == "tool":
            tool = vf.ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"])
            typed.append((tool, False))
        else:
            calls = [vf.ToolCall(id=c["id"], name=c["function"]["name"],
                                 arguments=c["function"]["arguments"])
                     for c in m.get("tool_calls") or []]
            reply = vf.AssistantMessage(content=m["content"], tool_calls=calls or None)
            typed.append((reply, True))
    nodes = [vf.MessageNode(parent=i - 1 if i else None, message=msg, sampled=sampled)
             for i, (msg, sampled) in enumerate(typed)]
    trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                     agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes)
    asyncio.run(task.score(trace))
    out[task_id] = trace.reward
print(json.dumps(out))
"""


async def run_in_verifiers(
    script: str, taskset: str, payload: Any, package: str = PACKAGE, *, python: Path | None = None
) -> Any:
    """`script` (argv[1]: `taskset`) run by the environment's own interpreter (`python`; default
    the v1 one of the environment `package` installs), `payload` as JSON on its stdin; what it
    prints, as JSON."""
    python = python or (await ensure_verifiers_venv([package])).python
    proc = await asyncio.create_subprocess_exec(
        str(python),
        "-I",
        "-c",
        script,
        taskset,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), 300)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    return json.loads(out)


async def reference_rewards(
    taskset: str, cases: list[tuple[str, list[dict[str, Any]]]], package: str = PACKAGE
) -> dict[str, float]:
    """`{task id: verifiers' trace.reward}` of each (task id, conversation)."""
    result: dict[str, float] = await run_in_verifiers(REFERENCE, taskset, cases, package)
    return result


async def run_verifiers_jobs(
    agentroll_server: ServerFactory,
    tmp_path: Path,
    instances: list[dict[str, Any]],
    *,
    policy: str,
    group_id: str,
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    """Each instance as a `verifiers` job in one group, through a real server and the scripted
    backend's `policy`; the results and the backend's request log."""
    jobs = [
        {"job_id": i["task"]["id"], "handler": "verifiers", "instance": i, "group_id": group_id}
        for i in instances
    ]
    async with (
        scripted_backend(wrong_rate=0.0, policy=policy) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
        return results, await request_log(backend)


async def _kill_workers_once_sampled(backend: RunningServer) -> list[int]:
    while not await request_log(backend):
        await asyncio.sleep(0.05)
    pids = default_workers().worker_pids  # this test's own server's workers
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


async def run_killing_workers(
    agentroll_server: ServerFactory, tmp_path: Path, job: dict[str, Any], policy: str
) -> tuple[Trajectory, list[int], list[dict[str, Any]]]:
    """`job` through a real server and the scripted backend's `policy`, its verifiers workers
    SIGKILLed (as the OOM killer would) once the policy's first reply is sampled; its result,
    the pids killed and the backend's request log."""
    async with (
        scripted_backend(wrong_rate=0.0, policy=policy) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        killer = asyncio.create_task(_kill_workers_once_sampled(backend))
        results = await run_jobs(client, [job], timeout_s=600)
        killed = await asyncio.wait_for(killer, 10)
        return results[job["job_id"]], killed, await request_log(backend)
