"""A verifiers worker process: a verifiers environment's own code, out of the server's process.

Started by `verifiers_env.workers` as `VENV/bin/python -s -P .../worker.py LIMIT PARENT` in the
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
    -> {"ok": true, "tools": [{"type": "function", "function": {...}}], "sandboxed": [],
        "turns": false}
    <- {"op": "call", "taskset": {...}, "task": {...}, "name": "calc_add", "arguments": {...}}
    -> {"ok": true, "text": "5", "is_error": false}
    <- {"op": "episode", "taskset": {...}, "task": {...}}
    -> {"turn": [{"role": "user", "content": "higher"}]}  <- {"reply": "7"} | {"end": "max_turns"}
    -> ... {"ok": true}

`episode` runs the taskset's own `vf.Env` (`turns`: true) with the policy as its one agent,
each turn relayed to the server (`episodes`), which answers a control's turns with empty replies.

`tools` and `call` serve the task's `vf.Toolset`s, as MCP tools named as verifiers' own
harness names them (`<server>_<tool>`): each call sets the toolsets up afresh (`setup`,
`setup_task`) and tears them down after. A tool that raises answers the model with its
error, as an MCP tool error does; so does anything else that fails once the toolsets are set
up (reading the tool's result, their teardown after the call): the model's arguments reached
it. Only toolsets that cannot set up fail as `load`.
A `call` here runs only the toolsets verifiers serves on its own host;
those it would serve in a box of their own run in the rollout's sandbox (`sandbox_call.py`).

`score`, `call` and `episode` (what the policy's text reaches) are answered by a child forked
for the request (`in_child`), which exits after it: nothing that code changes outlives the
request. The worker itself runs only the environment's loading and listing, from the job's
settings, and loads the request's task before the fork, so the child's failure is never
`load`. The child never holds the channel to the server: the worker relays its turns and
checks its one reply (`child_channel`, `reply_checks`: the rewards against the task's own).

Requests of a legacy environment (`legacy_*`, verifiers 0.3.1) are `legacy_worker.py`'s,
served by the same loop (its rollouts forked as `in_child`).

`retire` asks for a fresh worker: this one grew past half its memory limit, or a process it
did not start itself (one the reply's code left running) shares its sandbox.

A failure is `{"ok": false, "stage": "load" | "score" | "episode", "error": "Type: message",
"retire"}`: `load` while the taskset or its task was built (before the policy's work was
seen), `score` while the environment's reward and metric functions ran on it, `episode` while
its `Env.run` did. The worker never bounds time
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple


def _by_path(name: str, path: Path) -> Any:
    """A module of agentroll's, loaded by its file: its folder never joins the import path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_shared = _by_path("agentroll_grading_worker", Path(__file__).parent.parent / "grading_worker.py")
_env = _by_path("agentroll_verifiers_worker_env", Path(__file__).with_name("worker_env.py"))
_legacy = _by_path(
    "agentroll_verifiers_legacy_worker", Path(__file__).with_name("legacy_worker.py")
)
_checks = _by_path("agentroll_verifiers_reply_checks", Path(__file__).with_name("reply_checks.py"))
_channel = _by_path(
    "agentroll_verifiers_child_channel", Path(__file__).with_name("child_channel.py")
)

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
        problems.extend(_env.toolset_problems(toolset))
    if config.task.judges:
        problems.append("the taskset plugs LLM judges into its rewards")
    for attr in ("reward", "metric"):
        for name, fn in vars(task_cls).items():
            if callable(fn) and getattr(fn, attr, False):
                param = inspect.signature(fn).parameters.get("runtime")
                if param is not None and param.default is inspect.Parameter.empty:
                    problems.append(f"{attr} {name} needs the task's runtime")
    return problems


class Loaded(NamedTuple):
    cls: Any
    """The taskset class."""
    config: Any
    """Its validated config."""
    problems: list[str]
    """What its tasks need that is not run (`unsupported`, `env_problems`)."""
    env: Any
    """The package's own `vf.Env`, which drives the policy's turns; None for a plain
    taskset (verifiers runs it as one agent's single rollout)."""


class Environments:
    """Tasksets (and their environments) by their JSON, loaded once per worker."""

    def __init__(self) -> None:
        self._loaded: dict[str, Loaded] = {}
        self.warmed: set[str] = set()
        """Tasksets whose scoring ran once in the worker itself, on a control
        (`warm_up_once`)."""

    def get(self, taskset: dict[str, Any]) -> Loaded:
        key = json.dumps(taskset, sort_keys=True)
        if key not in self._loaded:
            from verifiers.v1.envs.single_agent import SingleAgentEnv
            from verifiers.v1.utils.loaders import (
                env_config_type,
                environment_class,
                taskset_class,
                taskset_config_type,
            )

            ident = str(taskset["id"])
            config = taskset_config_type(ident).model_validate(taskset)
            cls = taskset_class(ident)
            problems = unsupported(cls, config)
            env = None
            env_cls = environment_class(ident)
            if env_cls is not SingleAgentEnv:
                env = env_cls(env_config_type(ident).model_validate({"taskset": config}))
                problems += _env.env_problems(env)
            self._loaded[key] = Loaded(cls, config, problems, env)
        return self._loaded[key]


def list_tasks(envs: Environments, request: dict[str, Any]) -> dict[str, Any]:
    cls, config, problems, _ = envs.get(request["taskset"])
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
    cls, config, problems, _ = envs.get(request["taskset"])
    if problems:
        raise ValueError("; ".join(problems))
    task_cls = cls.task_type()
    return task_cls(task_cls.data_type().model_validate(request["task"]), config.task)


def failed(stage: str, exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}"}


def score(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any], replies: Any
) -> dict[str, Any]:
    try:
        task = load_task(envs, request)
        trace = build_trace(task, request["messages"], set(request["sampled"]))
        weights = {
            fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in task.hooks("reward")
        }
    except Exception as exc:  # the environment or the job is unusable: not the policy's doing
        return failed("load", exc)

    def respond() -> dict[str, Any]:
        try:
            loop.run_until_complete(task.score(trace))
        except Exception as exc:
            return failed("score", exc.__cause__ or exc)  # verifiers wraps it in a TaskError
        rewards = {
            name: None if r is None else {"score": r.score, "weight": r.weight}
            for name, r in trace.rewards.items()
        }
        return {"ok": True, "rewards": rewards, "metrics": dict(trace.metrics)}

    # A reward function may return a mapping: rewards of its own names, at its weight.
    clean = functools.partial(_checks.rubric_rewards, weights=weights, mapped=True)
    return in_child(respond, replies, _checks.reply_check(("score",), clean))


def warm_up_once(
    warmed: set[str],
    key: str,
    loop: asyncio.AbstractEventLoop,
    run: Callable[[], Any],
    replies: Any,
) -> None:
    """`run()`, the control of an environment's first request (nothing of the policy's in it),
    run once in the worker itself before its first child: what the environment's code builds
    on first use (validators, `isinstance` caches, package metadata) is then built once,
    shared by every child, not built afresh and copied page by page in each (a third of a
    child's CPU). Its result is not used: where it fails, the request fails again in the
    child, and is blamed there. A trial run in a child first: where it leaves the process a
    thread (a library's own), the worker is not warmed, since a child forked from a process
    with other threads inherits their locks held, and their work never done."""
    if key in warmed:
        return
    warmed.add(key)
    trial = _channel.in_child(
        lambda: {"alone": _warm_alone(loop, run)},
        [0, replies.fileno()],
        lambda reply, _marks: reply,
        lambda _why: {"alone": False},
        None,
    )
    if trial.get("alone") is True:
        _warm_alone(loop, run)


def _warm_alone(loop: asyncio.AbstractEventLoop, run: Callable[[], Any]) -> bool:
    """`run()` with a default executor of its own, joined after (`asyncio.to_thread` in a
    reward starts its threads), then a fresh one that starts none until used; whether the
    process is left with its one thread."""
    executor = ThreadPoolExecutor(thread_name_prefix="asyncio")
    loop.set_default_executor(executor)
    with contextlib.suppress(Exception):  # a control's failure says nothing here (see above)
        run()
    executor.shutdown(wait=True)
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="asyncio"))
    return len(os.listdir("/proc/self/task")) == 1


def scored_control(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]
) -> None:
    """The request's task scored on an empty reply, the policy's messages left out."""
    task = load_task(envs, request)
    trace = build_trace(task, [{"role": "assistant", "content": ""}], {0})
    loop.run_until_complete(task.score(trace))


def tool_schemas(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any]
) -> dict[str, Any]:
    """`tools`: the schemas the model is offered (nothing of the policy's is read)."""
    try:
        task = load_task(envs, request)
        return {"ok": True, **loop.run_until_complete(_env.tool_schemas(task))}
    except Exception as exc:
        return failed("load", exc)


def call(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any], replies: Any
) -> dict[str, Any]:
    """`call`: one call of the model's, in a child that says when its toolsets are set up
    (a failure before is the environment's, `load`; after, the call's error)."""
    try:
        task = load_task(envs, request)
    except Exception as exc:
        return failed("load", exc)
    name, arguments = str(request["name"]), request["arguments"]

    def respond() -> dict[str, Any]:
        set_up = functools.partial(_channel.tell_worker, {"mark": "set_up"})
        try:
            return loop.run_until_complete(_env.call_tool(task, name, arguments, "worker", set_up))
        except Exception as exc:  # before the toolsets were set up: the environment's
            return failed("load", exc)

    return in_child(respond, replies, _checks.call_check())


def episode(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any], replies: Any
) -> dict[str, Any]:
    """The taskset's own `vf.Env` runs one episode (`setup`, then `run`) with the policy as
    its agent; the conversation is scored afterwards, by `score`, as any rollout."""
    from verifiers.v1.agent import Agents

    try:
        task = load_task(envs, request)
        env = envs.get(request["taskset"]).env
        relay = _env.Relay(_channel.ask_worker)
        agents = Agents(env.config, lambda name, spec: _env.RelayAgent(relay))
    except Exception as exc:
        return failed("load", exc)

    def respond() -> dict[str, Any]:
        try:
            loop.run_until_complete(env.setup(agents))
            loop.run_until_complete(env.run(task, agents))
        except Exception as exc:  # the environment's code failed during the episode
            return failed("episode", exc)
        return {"ok": True}

    turns = server_relay(replies)
    return in_child(respond, replies, _checks.reply_check(("episode",), _checks.done, turns))


def strays() -> bool:
    """Whether a process besides this worker and its sandbox's init lives in its PID
    namespace (code a reward function ran started one): then the worker is retired, and its
    sandbox dies with it, so nothing outlives the grading that started it."""
    ours = {1, os.getpid()}
    return any(name.isdigit() and int(name) not in ours for name in os.listdir("/proc"))


def server_relay(replies: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A child's turn sent on to the server, and the server's answer read back."""

    def relay(message: dict[str, Any]) -> dict[str, Any]:
        _shared._send(replies, message)
        answer: dict[str, Any] = json.loads(sys.stdin.buffer.readline() or "{}")
        return answer

    return relay


def in_child(respond: Callable[[], Any], replies: Any, check: Any) -> Any:
    """`respond()`, the reply to a request the policy's text reaches (its reply scored, its
    tool call run), answered by a forked child that exits after: whatever that code changes
    (a class patched, a module's global, the task's own object) dies with the child, so no
    rollout's text reaches another rollout's scoring. The worker keeps only what it loaded
    before, from the job's own settings. The child never holds the server's channel or stdin:
    it talks to the worker alone, which relays its turns and checks its one reply (`check`,
    `child_channel`). A child that dies without a reply ends the worker with its status (the
    server sees the worker crash, as before)."""
    return _channel.in_child(respond, [0, replies.fileno()], *check)


def serve(
    envs: Environments, loop: asyncio.AbstractEventLoop, request: dict[str, Any], replies: Any
) -> dict[str, Any]:
    """A v1 taskset's request answered."""
    try:
        envs.get(request["taskset"])  # the environment's code, loaded once: job settings
    except Exception as exc:
        return failed("load", exc)
    if request["op"] == "tasks":
        try:
            return list_tasks(envs, request)
        except Exception as exc:
            return failed("load", exc)
    if request["op"] == "tools":  # schemas: nothing of the policy's is read
        reply = tool_schemas(envs, loop, request)
        reply["turns"] = envs.get(request["taskset"]).env is not None
        return reply
    if request["op"] == "score":
        key = json.dumps(request["taskset"], sort_keys=True)
        warm_up_once(envs.warmed, key, loop, lambda: scored_control(envs, loop, request), replies)
    gc.freeze()  # what the worker holds stays shared with its children, not copied
    if request["op"] == "call":
        return call(envs, loop, request, replies)
    if request["op"] == "episode":
        return episode(envs, loop, request, replies)
    return score(envs, loop, request, replies)


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
    envs, legacy_envs = Environments(), _legacy.Environments()
    loop = asyncio.new_event_loop()  # one for the worker's life: a loop per request costs
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if request["op"] in _legacy.OPS:  # a legacy environment (verifiers 0.3.1)
            reply = _legacy.serve(legacy_envs, loop, request, replies, sys.modules[__name__])
        else:
            reply = serve(envs, loop, request, replies)
        reply["retire"] = _shared._peak_memory_bytes() > retire_above or strays()
        _shared._send(replies, reply)


if __name__ == "__main__":
    main()
