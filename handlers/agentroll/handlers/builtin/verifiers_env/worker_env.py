"""What a verifiers worker (`worker.py`) serves beyond scoring: a task's toolsets as tools,
and the policy's side of an environment's turns. Loaded by `worker.py` by file path, in the
environment's interpreter: standard library and the environment's packages only."""

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

SANDBOX_RUNTIMES = frozenset({"docker", "podman", "apptainer"})
"""Container runtimes: verifiers serves such a toolset in a box of its own, and agentroll in
the rollout's own sandbox (`sandbox_tools`)."""
STAND_IN_IMAGE = "python:3.11-slim"
"""The image the rollout's sandbox stands in for (verifiers' default: a Python 3.11 system,
which the sandbox's system root and the environment's own interpreter are)."""
SANDBOX_WORKDIR = "/app"
"""The rollout's sandbox's working directory: verifiers' container default."""


def placement(toolset: Any) -> str:
    """Where the toolset runs: `sandbox` (the rollout's own sandbox) where verifiers would serve
    it in a box apart from its own host (colocated in the agent's runtime, or a container
    runtime), else `worker` (the environment's own process, as verifiers' host subprocess)."""
    config = toolset.config
    runtime = getattr(config, "runtime", None)
    if getattr(config, "colocated", False) or getattr(runtime, "type", "") in SANDBOX_RUNTIMES:
        return "sandbox"
    return "worker"


def toolset_problems(toolset: Any) -> list[str]:
    """What a task's toolset needs that agentroll does not run: a hosted sandbox provider, a
    container image or a GPU the rollout's sandbox does not stand in for, a server behind a
    URL, or a `State` synced through the rollout's state channel."""
    from verifiers.v1.state import State, state_cls

    name, config = type(toolset).__name__, toolset.config
    runtime: Any = getattr(config, "runtime", None)
    kind = getattr(runtime, "type", "subprocess")
    problems = []
    if placement(toolset) == "sandbox" and not getattr(config, "colocated", False):
        image = str(runtime.image).removeprefix("docker.io/").removeprefix("library/")
        if image != STAND_IN_IMAGE:
            problems.append(
                f"toolset {name} names the image {runtime.image!r}; its tools run in the "
                f"rollout's sandbox, which stands in for {STAND_IN_IMAGE!r} only"
            )
        if runtime.gpu:
            problems.append(f"toolset {name} needs a GPU ({runtime.gpu})")
        if runtime.workdir not in (None, SANDBOX_WORKDIR):
            problems.append(
                f"toolset {name} works in {runtime.workdir}; the rollout's sandbox works in "
                f"{SANDBOX_WORKDIR}"
            )
    elif kind != "subprocess":
        problems.append(
            f"toolset {name} needs a {kind} runtime (a hosted sandbox provider); agentroll "
            "runs a toolset in its environment's worker (subprocess) or in the rollout's "
            f"sandbox ({', '.join(sorted(SANDBOX_RUNTIMES))} or colocated)"
        )
    if getattr(config, "url", None):
        problems.append(f"toolset {name} is a remote server ({config.url})")
    if state_cls(type(toolset)) is not State:
        problems.append(f"toolset {name} keeps a State across calls")
    return problems


def env_problems(env: Any) -> list[str]:
    """What the taskset's own `vf.Env` does that agentroll does not run: more than the one
    agent the policy plays, judgement across agents (`finalize`), or tools beside turns."""
    import verifiers.v1 as vf
    from verifiers.v1.configs.agent import agent_config_fields

    name, problems = type(env).__name__, []
    agents = sorted(agent_config_fields(env.config))
    if len(agents) != 1:
        problems.append(f"environment {name} declares agents {agents}; the policy plays one")
    if type(env).finalize is not vf.Env.finalize:
        problems.append(f"environment {name} judges across agents (finalize)")
    task_cls = type(env.taskset).task_type()
    if task_cls.toolsets(env.taskset.config.task):
        problems.append(f"environment {name} drives turns of a task with tools")
    return problems


class Served(NamedTuple):
    server: Any
    """The in-process MCP server its toolset is registered on."""
    raw: str
    """The tool's own name on that server."""
    where: str
    """Where its toolset runs (`placement`)."""


@contextlib.asynccontextmanager
async def served_tools(task: Any, where: str | None = None) -> AsyncIterator[dict[str, Served]]:
    """The task's toolsets (those `where` places, or all) set up for one request, registered
    on in-process MCP servers, by tool name as the model sees it."""
    from mcp.server.mcpserver import MCPServer

    dispatch: dict[str, Served] = {}
    async with contextlib.AsyncExitStack() as stack:
        for toolset in type(task).toolsets(task.config):
            runs = placement(toolset)
            if where is not None and runs != where:
                continue
            await stack.enter_async_context(toolset._exit_stack)  # what `setup` holds
            await toolset.setup()
            await toolset.setup_task(task)
            server = MCPServer(toolset.server_name or type(toolset).__name__)
            toolset.register(server)
            for tool in await server.list_tools():
                prefix = toolset.server_name
                name = f"{prefix}_{tool.name}" if prefix else tool.name
                dispatch[name] = Served(server, tool.name, runs)
        yield dispatch


async def tool_schemas(task: Any, where: str | None = None) -> dict[str, Any]:
    """`{"tools": the OpenAI function schemas, "sandboxed": the names of those whose toolset
    runs in the rollout's sandbox}`, of the toolsets `where` places (or all)."""
    async with served_tools(task, where) as dispatch:
        schemas = []
        for name, served in dispatch.items():
            tool = next(t for t in await served.server.list_tools() if t.name == served.raw)
            function = {
                "name": name,
                "description": tool.description or "",
                "parameters": tool.input_schema,
            }
            schemas.append({"type": "function", "function": function})
        sandboxed = [name for name, served in dispatch.items() if served.where == "sandbox"]
        return {"tools": schemas, "sandboxed": sandboxed}


async def call_served(
    dispatch: dict[str, Served], name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """The model's call of a tool of toolsets already set up, answered; a tool that raises
    answers with its error, as MCP shows it (the model's arguments reached it)."""
    if name not in dispatch:
        return {"ok": True, "text": f"Unknown tool: {name}", "is_error": True}
    server, raw, _ = dispatch[name]
    try:
        result = await server.call_tool(raw, arguments)
    except Exception as exc:  # failed on the model's call: it reads why
        return {"ok": True, "text": str(exc), "is_error": True}
    texts = [b.text if b.type == "text" else str(b) for b in result.content]
    return {"ok": True, "text": "\n".join(texts), "is_error": bool(result.is_error)}


async def call_tool(
    task: Any,
    name: str,
    arguments: dict[str, Any],
    where: str = "worker",
    on_set_up: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The model's call of a tool of the toolsets `where` places, answered. Only a failure
    before the toolsets are set up is the environment's (raised: `load`); once they are,
    whatever fails (the tool, reading its result, the toolsets' teardown after the model's
    call) is the call's, answered to the model as its error: its arguments reached that code.
    `on_set_up()` runs once they are set up, before the arguments reach them."""
    set_up = False
    try:
        async with served_tools(task, where) as dispatch:
            set_up = True
            on_set_up()
            return await call_served(dispatch, name, arguments)
    except Exception as exc:
        if not set_up:
            raise
        return {"ok": True, "text": f"{type(exc).__name__}: {exc}", "is_error": True}


class Relay:
    """The policy's side of an episode's turns: each turn is asked of the server, which
    samples the policy's reply (its tokens recorded there, exactly), or answers a control's
    empty reply (`episodes.empty_replies`). `send` is the forked child's channel to its worker
    (`child_channel.ask_worker`), which relays the turn to the server and returns its answer."""

    def __init__(self, send: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.send = send

    def ask(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return self.send({"turn": messages})


class RelayInteraction:
    """What `agent.interaction(task)` yields to the environment's `run()`: `turn(message)`
    sends its user message(s) to the policy and returns the policy's reply as a segment."""

    def __init__(self, relay: Relay) -> None:
        self.relay, self.over = relay, False

    async def turn(self, message: Any = None) -> Any:
        import verifiers.v1 as vf
        from verifiers.v1.agent import Segment

        if self.over:
            raise RuntimeError("the exchange is over (the run ended)")
        if isinstance(message, str):
            messages = [{"role": "user", "content": message}]
        else:
            messages = [
                m if isinstance(m, dict) else m.model_dump(mode="json", exclude_none=True)
                for m in message or []
            ]
        answer = self.relay.ask(messages)
        if "reply" not in answer:  # the rollout's limits ended it
            self.over = True
            return Segment(messages=[], terminated=True)
        return Segment(messages=[vf.AssistantMessage(content=answer["reply"])])


class RelayAgent:
    """The one agent of the environment, played by the policy."""

    trainable = True

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    @contextlib.asynccontextmanager
    async def interaction(self, task: Any, **_: Any) -> AsyncIterator[RelayInteraction]:
        yield RelayInteraction(self.relay)
