"""A verifiers worker process: a verifiers environment's own code, out of the server's process.

Started by `verifiers_env.workers` as `VENV/bin/python -I .../worker.py LIMIT PARENT` in the
environment's own virtual environment (`verifiers_env.venv`: verifiers pins packages the
server's environment cannot hold). Isolated like the math grading workers (`grader_launch`):
standard library and the environment's packages only, no agentroll import; the helpers it
shares with them are loaded from `grading_worker.py` by file path, so its folder never joins
the import path. It takes its reply channel before it imports verifiers, caps its address
space and serves requests, one JSON object per line, until stdin closes:

    -> {"ready": true, "verifiers": "0.4.0"}
    <- {"op": "tasks", "taskset": {"id": ..., ...}, "skip": 0, "limit": 100}
    -> {"ok": true, "tasks": [{"data": {...}, "key": "...", "type": "EchoTask"}],
        "unsupported": ["why", ...]}
    <- {"op": "score", "taskset": {...}, "task": {...}, "messages": [...], "sampled": [2, 4]}
    -> {"ok": true, "rewards": {"name": {"score": 1.0, "weight": 1.0} | null},
        "metrics": {"name": 1.0 | null}, "retire": false}

`retire` asks for a fresh worker: this one grew past half its memory limit, or a process it
did not start itself (one the reply's code left running) shares its sandbox.

A failure is `{"ok": false, "stage": "load" | "score", "error": "Type: message", "retire"}`:
`load` while the taskset or its task was built (before the policy's work was seen), `score`
while the environment's reward and metric functions ran on it. The worker never bounds time
itself (a reward function may block its event loop): the server kills a worker that overruns.
"""

import asyncio
import functools
import importlib.util
import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

_shared_spec = importlib.util.spec_from_file_location(
    "agentroll_grading_worker", Path(__file__).parent.parent / "grading_worker.py"
)
assert _shared_spec is not None and _shared_spec.loader is not None
_shared = importlib.util.module_from_spec(_shared_spec)
_shared_spec.loader.exec_module(_shared)

MAX_TASKS = 100_000


def unsupported(task_cls: Any, config: Any) -> list[str]:
    """What a task of this type needs that agentroll does not run yet (refused, never
    scored without it: a reward skipped for want of a runtime would read as a score)."""
    import inspect

    problems: list[str] = []
    if getattr(task_cls, "NEEDS_CONTAINER", False):
        problems.append(f"{task_cls.__name__} needs a container runtime")
    if task_cls.toolsets(config.task):
        problems.append(f"{task_cls.__name__} declares tool servers (toolsets)")
    if config.task.judges:
        problems.append("the taskset plugs LLM judges into its rewards")
    for attr in ("reward", "metric"):
        for name, fn in vars(task_cls).items():
            if callable(fn) and getattr(fn, attr, False):
                param = inspect.signature(fn).parameters.get("runtime")
                if param is not None and param.default is inspect.Parameter.empty:
                    problems.append(f"{attr} {name} needs the task's runtime")
    return problems


class Environments:
    """Taskset classes and configs by their JSON, loaded once per worker."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Any, Any]] = {}

    def get(self, taskset: dict[str, Any]) -> tuple[Any, Any]:
        """(taskset class, validated taskset config)."""
        key = json.dumps(taskset, sort_keys=True)
        if key not in self._loaded:
            from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

            ident = str(taskset["id"])
            config = taskset_config_type(ident).model_validate(taskset)
            self._loaded[key] = (taskset_class(ident), config)
        return self._loaded[key]


def list_tasks(envs: Environments, request: dict[str, Any]) -> dict[str, Any]:
    cls, config = envs.get(request["taskset"])
    skip, limit = int(request.get("skip", 0)), min(int(request.get("limit", MAX_TASKS)), MAX_TASKS)
    view = cls(config).skip(skip).take(limit)
    tasks = [
        {
            "data": task.data.model_dump(mode="json", exclude_none=True),
            "key": task.key,
            "type": type(task).__name__,
        }
        for task in view
    ]
    return {"ok": True, "tasks": tasks, "unsupported": unsupported(cls.task_type(), config)}


@functools.cache
def _messages_adapter() -> Any:
    import verifiers.v1 as vf
    from pydantic import TypeAdapter

    return TypeAdapter(vf.Messages)


def build_trace(task: Any, messages: list[dict[str, Any]], sampled: set[int]) -> Any:
    """The rollout as a verifiers trace: one branch of message nodes, the policy's own
    replies marked sampled (what `trace.last_reply` and `assistant_messages` read)."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    parsed = _messages_adapter().validate_python(messages)
    nodes = [
        MessageNode(parent=i - 1 if i else None, message=message, sampled=i in sampled)
        for i, message in enumerate(parsed)
    ]
    return vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
        is_completed=True,
        ok=True,
    )


def score(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]
) -> dict[str, Any]:
    try:
        cls, config = envs.get(request["taskset"])
        task_cls = cls.task_type()
        problems = unsupported(task_cls, config)
        if problems:
            raise ValueError("; ".join(problems))
        task = task_cls(task_cls.data_type().model_validate(request["task"]), config.task)
        trace = build_trace(task, request["messages"], set(request["sampled"]))
    except Exception as exc:  # the environment or the job is unusable: not the policy's doing
        return {"ok": False, "stage": "load", "error": f"{type(exc).__name__}: {exc}"}
    try:
        loop.run_until_complete(task.score(trace))
    except Exception as exc:
        cause = exc.__cause__ or exc  # verifiers wraps it in a TaskError
        return {"ok": False, "stage": "score", "error": f"{type(cause).__name__}: {cause}"}
    rewards = {
        name: None if r is None else {"score": r.score, "weight": r.weight}
        for name, r in trace.rewards.items()
    }
    return {"ok": True, "rewards": rewards, "metrics": dict(trace.metrics)}


def strays() -> bool:
    """Whether a process besides this worker and its sandbox's init lives in its PID
    namespace (code a reward function ran started one): then the worker is retired, and its
    sandbox dies with it, so nothing outlives the grading that started it."""
    ours = {1, os.getpid()}
    return any(name.isdigit() and int(name) not in ours for name in os.listdir("/proc"))


def main() -> None:
    memory_limit, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    _shared._die_with(parent_pid)
    os.nice(_shared.GRADER_NICENESS)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the environment prints goes to stderr, never into the replies
    import verifiers  # only once the replies are ours

    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    retire_above = (_shared._peak_memory_bytes() + memory_limit) // 2
    _shared._send(replies, {"ready": True, "verifiers": verifiers.__version__})
    envs = Environments()
    loop = asyncio.new_event_loop()  # one for the worker's life: a loop per request costs
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if request["op"] == "tasks":
            try:
                reply = list_tasks(envs, request)
            except Exception as exc:
                reply = {"ok": False, "stage": "load", "error": f"{type(exc).__name__}: {exc}"}
        else:
            reply = score(envs, loop, request)
        reply["retire"] = _shared._peak_memory_bytes() > retire_above or strays()
        _shared._send(replies, reply)


if __name__ == "__main__":
    main()
