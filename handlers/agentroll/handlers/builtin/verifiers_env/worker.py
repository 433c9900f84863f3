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
    <- {"op": "tools", "taskset": {...}, "task": {...}}
    -> {"ok": true, "tools": [{"type": "function", "function": {"name": ..., ...}}]}
    <- {"op": "call", "taskset": {...}, "task": {...}, "name": "calc_add", "arguments": {...}}
    -> {"ok": true, "text": "5", "is_error": false}

`tools` and `call` serve the task's `vf.Toolset`s, as MCP tools named as verifiers' own
harness names them (`<server>_<tool>`): each call sets the toolsets up afresh (`setup`,
`setup_task`) and tears them down after. A tool that raises answers the model with its
error, as an MCP tool error does.

`score` and `call` (what the policy's text reaches) are answered by a child forked for the
request (`in_child`), which exits after it: nothing that code changes outlives the request.
The worker itself runs only the environment's loading and listing, from the job's settings.

`retire` asks for a fresh worker: this one grew past half its memory limit, or a process it
did not start itself (one the reply's code left running) shares its sandbox.

A failure is `{"ok": false, "stage": "load" | "score", "error": "Type: message", "retire"}`:
`load` while the taskset or its task was built (before the policy's work was seen), `score`
while the environment's reward and metric functions ran on it. The worker never bounds time
itself (a reward function may block its event loop): the server kills a worker that overruns.
"""

import asyncio
import contextlib
import functools
import gc
import importlib.util
import json
import os
import resource
import sys
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

_shared_spec = importlib.util.spec_from_file_location(
    "agentroll_grading_worker", Path(__file__).parent.parent / "grading_worker.py"
)
assert _shared_spec is not None and _shared_spec.loader is not None
_shared = importlib.util.module_from_spec(_shared_spec)
_shared_spec.loader.exec_module(_shared)

MAX_TASKS = 100_000


def unsupported(taskset_cls: Any, config: Any) -> list[str]:
    """What the taskset's tasks need that agentroll does not run yet (refused, never
    scored without it: a reward skipped for want of a runtime would read as a score)."""
    import inspect

    task_cls = taskset_cls.task_type()
    problems: list[str] = []
    if taskset_cls.toolsets(config):
        problems.append(f"{taskset_cls.__name__} shares tool servers across its tasks")
    if getattr(task_cls, "NEEDS_CONTAINER", False):
        problems.append(f"{task_cls.__name__} needs a container runtime")
    for toolset in task_cls.toolsets(config.task):
        problems.extend(toolset_problems(toolset))
    if config.task.judges:
        problems.append("the taskset plugs LLM judges into its rewards")
    for attr in ("reward", "metric"):
        for name, fn in vars(task_cls).items():
            if callable(fn) and getattr(fn, attr, False):
                param = inspect.signature(fn).parameters.get("runtime")
                if param is not None and param.default is inspect.Parameter.empty:
                    problems.append(f"{attr} {name} needs the task's runtime")
    return problems


def toolset_problems(toolset: Any) -> list[str]:
    """What a task's toolset needs beyond this process: verifiers would run it colocated in
    the agent's runtime, in a container or behind a URL, or sync its `State` through the
    rollout's state channel. A plain toolset runs here, in the environment's own process."""
    from verifiers.v1.runtimes import SubprocessConfig
    from verifiers.v1.state import State, state_cls

    name, config = type(toolset).__name__, toolset.config
    problems = []
    if getattr(config, "colocated", False):
        problems.append(f"toolset {name} runs colocated in the agent's runtime")
    if not isinstance(getattr(config, "runtime", SubprocessConfig()), SubprocessConfig):
        problems.append(f"toolset {name} needs a {config.runtime.type} runtime")
    if getattr(config, "url", None):
        problems.append(f"toolset {name} is a remote server ({config.url})")
    if state_cls(type(toolset)) is not State:
        problems.append(f"toolset {name} keeps a State across calls")
    return problems


class Environments:
    """Taskset classes and configs by their JSON, loaded once per worker."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Any, Any, list[str]]] = {}

    def get(self, taskset: dict[str, Any]) -> tuple[Any, Any, list[str]]:
        """(taskset class, validated taskset config, what it needs that is not run)."""
        key = json.dumps(taskset, sort_keys=True)
        if key not in self._loaded:
            from verifiers.v1.utils.loaders import taskset_class, taskset_config_type

            ident = str(taskset["id"])
            config = taskset_config_type(ident).model_validate(taskset)
            cls = taskset_class(ident)
            self._loaded[key] = (cls, config, unsupported(cls, config))
        return self._loaded[key]


def list_tasks(envs: Environments, request: dict[str, Any]) -> dict[str, Any]:
    cls, config, problems = envs.get(request["taskset"])
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
    return {"ok": True, "tasks": tasks, "unsupported": problems}


@functools.cache
def _messages_adapter() -> Any:
    import verifiers.v1 as vf
    from pydantic import TypeAdapter

    return TypeAdapter(vf.Messages)


def vf_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as verifiers' types read it: an OpenAI tool call
    (`{"id", "function": {"name", "arguments"}}`) becomes verifiers' flat `ToolCall`."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    flat = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in calls
    ]
    return {**message, "tool_calls": flat}


def build_trace(task: Any, messages: list[dict[str, Any]], sampled: set[int]) -> Any:
    """The rollout as a verifiers trace: one branch of message nodes, the policy's own
    replies marked sampled (what `trace.last_reply` and `assistant_messages` read)."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    parsed = _messages_adapter().validate_python([vf_message(m) for m in messages])
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


def load_task(envs: Environments, request: dict[str, Any]) -> Any:
    """The request's task, refused where it needs what is not run."""
    cls, config, problems = envs.get(request["taskset"])
    if problems:
        raise ValueError("; ".join(problems))
    task_cls = cls.task_type()
    return task_cls(task_cls.data_type().model_validate(request["task"]), config.task)


def failed(stage: str, exc: BaseException) -> dict[str, Any]:
    cause = exc.__cause__ or exc  # verifiers wraps it in a TaskError
    return {"ok": False, "stage": stage, "error": f"{type(cause).__name__}: {cause}"}


def score(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]
) -> dict[str, Any]:
    try:
        task = load_task(envs, request)
        trace = build_trace(task, request["messages"], set(request["sampled"]))
    except Exception as exc:  # the environment or the job is unusable: not the policy's doing
        return failed("load", exc)
    try:
        loop.run_until_complete(task.score(trace))
    except Exception as exc:
        return failed("score", exc)
    rewards = {
        name: None if r is None else {"score": r.score, "weight": r.weight}
        for name, r in trace.rewards.items()
    }
    return {"ok": True, "rewards": rewards, "metrics": dict(trace.metrics)}


@contextlib.asynccontextmanager
async def served_tools(task: Any) -> AsyncIterator[dict[str, tuple[Any, str]]]:
    """The task's toolsets set up for one request, registered on in-process MCP servers:
    `{tool name as the model sees it: (server, the server's own tool name)}`."""
    from mcp.server.mcpserver import MCPServer

    dispatch: dict[str, tuple[Any, str]] = {}
    async with contextlib.AsyncExitStack() as stack:
        for toolset in type(task).toolsets(task.config):
            await stack.enter_async_context(toolset._exit_stack)  # what `setup` holds
            await toolset.setup()
            await toolset.setup_task(task)
            server = MCPServer(toolset.server_name or type(toolset).__name__)
            toolset.register(server)
            for tool in await server.list_tools():
                prefix = toolset.server_name
                dispatch[f"{prefix}_{tool.name}" if prefix else tool.name] = (server, tool.name)
        yield dispatch


async def tool_schemas(task: Any) -> list[dict[str, Any]]:
    async with served_tools(task) as dispatch:
        schemas = []
        for name, (server, raw) in dispatch.items():
            tool = next(t for t in await server.list_tools() if t.name == raw)
            function = {
                "name": name,
                "description": tool.description or "",
                "parameters": tool.input_schema,
            }
            schemas.append({"type": "function", "function": function})
        return schemas


async def call_tool(task: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with served_tools(task) as dispatch:
        if name not in dispatch:
            return {"ok": True, "text": f"Unknown tool: {name}", "is_error": True}
        server, raw = dispatch[name]
        try:
            result = await server.call_tool(raw, arguments)
        except Exception as exc:  # the tool failed on the model's call: the model reads why
            return {"ok": True, "text": f"Error executing tool {name}: {exc}", "is_error": True}
        texts = [b.text if b.type == "text" else str(b) for b in result.content]
        return {"ok": True, "text": "\n".join(texts), "is_error": bool(result.is_error)}


def serve_tools(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]
) -> dict[str, Any]:
    """`tools` (the schemas the model is offered) or `call` (one call of the model's)."""
    try:
        task = load_task(envs, request)
        if request["op"] == "tools":
            return {"ok": True, "tools": loop.run_until_complete(tool_schemas(task))}
        args = request["arguments"]
        return loop.run_until_complete(call_tool(task, str(request["name"]), args))
    except Exception as exc:  # a toolset that cannot set up is the environment's
        return failed("load", exc)


def strays() -> bool:
    """Whether a process besides this worker and its sandbox's init lives in its PID
    namespace (code a reward function ran started one): then the worker is retired, and its
    sandbox dies with it, so nothing outlives the grading that started it."""
    ours = {1, os.getpid()}
    return any(name.isdigit() and int(name) not in ours for name in os.listdir("/proc"))


def answer(envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]) -> Any:
    if request["op"] in ("tools", "call"):
        return serve_tools(envs, loop, request)
    return score(envs, loop, request)


def in_child(envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]) -> Any:
    """The reply to a request the policy's text reaches (its reply scored, its tool call
    run), answered by a forked child that exits after: whatever that code changes (a class
    patched, a module's global, the task's own object) dies with the child, so no rollout's
    text reaches another rollout's scoring. The worker keeps only what it loaded before,
    from the job's own settings. A child that dies without a reply ends the worker with its
    status (the server sees the worker crash, as before)."""
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(readable)
        try:
            text = json.dumps(answer(envs, loop, request))
            with os.fdopen(writable, "w") as out:
                out.write(text)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    os.close(writable)
    with os.fdopen(readable) as pipe:
        text = pipe.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0 or not text:
        os._exit(code if code > 0 else 128 - code)
    return json.loads(text)


def main() -> None:
    memory_limit, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    _shared._die_with(parent_pid)
    os.nice(_shared.GRADER_NICENESS)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the environment prints goes to stderr, never into the replies
    import verifiers  # only once the replies are ours

    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    _messages_adapter()  # built once here, not in every child
    retire_above = (_shared._peak_memory_bytes() + memory_limit) // 2
    _shared._send(replies, {"ready": True, "verifiers": verifiers.__version__})
    envs = Environments()
    loop = asyncio.new_event_loop()  # one for the worker's life: a loop per request costs
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            envs.get(request["taskset"])  # the environment's code, loaded once: job settings
        except Exception as exc:
            reply = failed("load", exc)
        else:
            if request["op"] == "tasks":
                try:
                    reply = list_tasks(envs, request)
                except Exception as exc:
                    reply = failed("load", exc)
            elif request["op"] == "tools":  # schemas: nothing of the policy's is read
                reply = serve_tools(envs, loop, request)
            else:
                gc.freeze()  # what the worker holds stays shared with its children, not copied
                reply = in_child(envs, loop, request)
        reply["retire"] = _shared._peak_memory_bytes() > retire_above or strays()
        _shared._send(replies, reply)


if __name__ == "__main__":
    main()
