"""Finding handlers (tasks) and agents by name, and composing one job's handler.

Lookup order (see `agentroll.handlers.plugins`): explicit registration, built-ins, the
entry-point group (`agentroll.handlers` for handlers, `agentroll.agents` for agents), then a
`module:Class` path. A name claimed twice is an error, never a silent override. A class that
leaves an abstract stage (`run`, `eval`) unimplemented is refused when it is registered or
first resolved, never mid-rollout.

`HandlerRegistry.for_job(request)` is what the server drives for one job: the task's own
handler (its default agent) when the job names no agent, else the task under that agent.
"""

import inspect
from collections.abc import Mapping
from typing import Any, Protocol

from agentroll.handlers.agent.handler import ToolAgentHandler
from agentroll.handlers.agents import Agent
from agentroll.handlers.base import AgentHandler
from agentroll.handlers.compose import ComposedHandler
from agentroll.handlers.errors import (
    DuplicateHandlerError,
    RegistryError,
    UnknownAgentError,
    UnknownHandlerError,
)
from agentroll.handlers.plugins import PluginRegistry

ENTRY_POINT_GROUP = "agentroll.handlers"
AGENT_ENTRY_POINT_GROUP = "agentroll.agents"

BUILTIN_HANDLERS: dict[str, str] = {
    "code": "agentroll.handlers.builtin.code:CodeHandler",
    "harbor": "agentroll.handlers.builtin.harbor.handler:HarborHandler",
    "llm_judge": "agentroll.handlers.builtin.llm_judge:LLMJudgeHandler",
    "math": "agentroll.handlers.builtin.math:MathHandler",
    "openenv": "agentroll.handlers.builtin.openenv:OpenEnvHandler",
    "openreward": "agentroll.handlers.builtin.openreward:OpenRewardHandler",
    "remote_verify": "agentroll.handlers.builtin.remote_verify:RemoteVerifyHandler",
    "solve_verify": "agentroll.handlers.builtin.solve_verify:SolveVerifyHandler",
    "stem": "agentroll.handlers.builtin.stem:StemHandler",
    "swe": "agentroll.handlers.builtin.swe:SweHandler",
    "verifiers": "agentroll.handlers.builtin.verifiers_env:VerifiersHandler",
}
HARNESS_JOB = "harness"
"""Not a handler of its own: a job form naming a task and a harness in its instance
(`agentroll.handlers.builtin.harness`)."""

HARNESS_AGENT = "agentroll.handlers.harness.agent:HarnessAgent"
BUILTIN_AGENTS: dict[str, str] = {
    "tool_loop": "agentroll.handlers.agent.tool_loop:ToolLoopAgent",
    "answer": "agentroll.handlers.agent.answer:AnswerAgent",
    # Each harness preset is an agent (the `type`s of `HarnessConfig`).
    **{
        preset: HARNESS_AGENT
        for preset in (
            "shell",
            "mini_swe_agent",
            "claude_code",
            "codex",
            "gemini_cli",
            "opencode",
            "qwen_code",
        )
    },
}


class JobSpec(Protocol):
    """What the registry reads of a job request."""

    @property
    def handler(self) -> str: ...
    @property
    def instance(self) -> Mapping[str, Any]: ...
    @property
    def agent(self) -> Mapping[str, Any] | None: ...


def _as_handler_class(obj: object, origin: str) -> type[AgentHandler]:
    if not (isinstance(obj, type) and issubclass(obj, AgentHandler)):
        raise RegistryError(f"{origin} is not an AgentHandler subclass: {obj!r}")
    missing = sorted(obj.__abstractmethods__) if inspect.isabstract(obj) else []
    if (
        issubclass(obj, ToolAgentHandler)
        and obj.grade is ToolAgentHandler.grade
        and obj.eval is ToolAgentHandler.eval
    ):
        missing.append("grade")
    if missing:
        raise RegistryError(
            f"{origin} ({obj.__module__}.{obj.__qualname__}) does not implement "
            f"{', '.join(missing)}"
        )
    return obj


def _as_agent_class(obj: object, origin: str) -> type[Agent]:
    if not (isinstance(obj, type) and issubclass(obj, Agent)) or inspect.isabstract(obj):
        raise RegistryError(f"{origin} is not a complete Agent subclass: {obj!r}")
    return obj


class AgentRegistry:
    """Builds a job's agent from its `{"type": name, ...settings}` object."""

    def __init__(self) -> None:
        self._classes = PluginRegistry[type[Agent]](
            "agent",
            convert=_as_agent_class,
            unknown=UnknownAgentError,
            duplicate=DuplicateHandlerError,
            builtins=BUILTIN_AGENTS,
            group=AGENT_ENTRY_POINT_GROUP,
        )

    def register(self, name: str, cls: type[Agent]) -> None:
        self._classes.register(name, cls)

    def names(self) -> list[str]:
        return self._classes.names()

    def build(self, spec: Mapping[str, Any]) -> Agent:
        """`UnknownAgentError` for an unknown type; `ValueError` for wrong settings."""
        kind = spec.get("type")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"agent: 'type' must name an agent ({', '.join(self.names())})")
        settings = {key: value for key, value in spec.items() if key != "type"}
        try:
            return self._classes.get(kind).from_config(kind, settings)
        except ValueError as exc:
            raise ValueError(f"agent {kind!r}: {exc}") from exc


class HandlerRegistry:
    """Resolves handler names to shared handler instances (one per name, created lazily),
    and a job to the handler the server drives for it (`for_job`)."""

    def __init__(self) -> None:
        self._classes = PluginRegistry[type[AgentHandler]](
            "handler",
            convert=_as_handler_class,
            unknown=UnknownHandlerError,
            duplicate=DuplicateHandlerError,
            builtins=BUILTIN_HANDLERS,
            group=ENTRY_POINT_GROUP,
        )
        self._instances: dict[str, AgentHandler] = {}
        self.agents = AgentRegistry()

    def register(self, cls: type[AgentHandler], name: str | None = None) -> None:
        """Serve `cls` under `name` (default: `cls.name`); `DuplicateHandlerError` if taken,
        `RegistryError` if `cls` is not a complete `AgentHandler` subclass."""
        self._classes.register(name or cls.name, cls)

    def names(self) -> list[str]:
        """Every handler name known without a path, sorted."""
        return self._classes.names()

    def job_names(self) -> list[str]:
        """Every name a job may give as its handler: the handlers and the `harness` form."""
        return sorted([*self.names(), HARNESS_JOB])

    def get(self, name: str) -> AgentHandler:
        """The shared handler for `name`; `UnknownHandlerError` or `RegistryError` if none."""
        handler = self._instances.get(name)
        if handler is None:
            handler = self._classes.get(name)()
            self._instances[name] = handler
        return handler

    def for_job(self, job: JobSpec) -> AgentHandler:
        """The handler to drive `job`: its task's own, or the task under the job's agent.
        `ValueError` if the agent or a `harness` instance is unusable; registry errors for
        unknown names."""
        if job.handler == HARNESS_JOB:
            from agentroll.handlers.builtin.harness import harness_job

            if job.agent is not None:
                raise ValueError("a harness job names its agent in its instance, not in 'agent'")
            return harness_job(job.instance, self.get)
        handler = self.get(job.handler)
        if job.agent is None:
            return handler
        if not isinstance(handler, ToolAgentHandler):
            raise ValueError(
                f"handler {job.handler!r} runs its own agents (it is not a task): a job for it "
                "names no 'agent'"
            )
        return ComposedHandler(handler, self.agents.build(job.agent))

    @staticmethod
    def task_instance(job: JobSpec) -> Mapping[str, Any]:
        """The instance the job's task reads as `ctx.instance` (a `harness` job's `task`)."""
        if job.handler == HARNESS_JOB:
            inner = job.instance.get("task")
            return inner if isinstance(inner, Mapping) else {}
        return job.instance
