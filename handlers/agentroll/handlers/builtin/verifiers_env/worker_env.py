"""What a verifiers worker (`worker.py`) serves beyond scoring: a task's toolsets as tools,
and the policy's side of an environment's turns. Loaded by `worker.py` by file path, in the
environment's interpreter: standard library and the environment's packages only."""

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any


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
    """The model's call answered. Only a failure before the toolsets are set up is the
    environment's (raised: `load`); once they are, whatever fails (the tool, reading its
    result, the toolsets' teardown after the model's call) is the call's, answered to the
    model as its error: the model's arguments reached that code."""
    set_up = False
    try:
        async with served_tools(task) as dispatch:
            set_up = True
            if name not in dispatch:
                return {"ok": True, "text": f"Unknown tool: {name}", "is_error": True}
            server, raw = dispatch[name]
            try:
                result = await server.call_tool(raw, arguments)
            except Exception as exc:  # failed on the model's call: it reads why, as MCP shows it
                return {"ok": True, "text": str(exc), "is_error": True}
            texts = [b.text if b.type == "text" else str(b) for b in result.content]
            return {"ok": True, "text": "\n".join(texts), "is_error": bool(result.is_error)}
    except Exception as exc:
        if not set_up:
            raise
        return {"ok": True, "text": f"{type(exc).__name__}: {exc}", "is_error": True}


class Relay:
    """The policy's side of an episode's turns: each turn is asked of the server, which
    samples the policy's reply (its tokens recorded there, exactly); the control answers
    every turn with an empty reply itself."""

    def __init__(self, send: Callable[[dict[str, Any]], None], request: dict[str, Any]) -> None:
        self.send, self.control = send, bool(request["control"])
        self.turns_left = int(request.get("max_turns", 0))

    def ask(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if self.control:
            self.turns_left -= 1
            return {"reply": ""} if self.turns_left >= 0 else {"end": "max_turns"}
        self.send({"turn": messages})
        answer: dict[str, Any] = json.loads(sys.stdin.buffer.readline() or "{}")
        return answer


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
