"""Finding handlers by name.

Lookup order (see `agentroll.handlers.plugins`): explicit registration, built-ins, the
entry-point group `agentroll.handlers`, then a `module:Class` path. A name claimed twice is an
error, never a silent override. A class that leaves an abstract stage (`run`, `eval`)
unimplemented is refused when it is registered or first resolved, never mid-rollout.
"""

import inspect

from agentroll.handlers.base import AgentHandler
from agentroll.handlers.errors import DuplicateHandlerError, RegistryError, UnknownHandlerError
from agentroll.handlers.plugins import PluginRegistry

ENTRY_POINT_GROUP = "agentroll.handlers"

BUILTIN_HANDLERS: dict[str, str] = {
    "code": "agentroll.handlers.builtin.code:CodeHandler",
    "harbor": "agentroll.handlers.builtin.harbor.handler:HarborHandler",
    "harness": "agentroll.handlers.builtin.harness:HarnessHandler",
    "llm_judge": "agentroll.handlers.builtin.llm_judge:LLMJudgeHandler",
    "math": "agentroll.handlers.builtin.math:MathHandler",
    "openenv": "agentroll.handlers.builtin.openenv:OpenEnvHandler",
    "remote_verify": "agentroll.handlers.builtin.remote_verify:RemoteVerifyHandler",
    "solve_verify": "agentroll.handlers.builtin.solve_verify:SolveVerifyHandler",
    "stem": "agentroll.handlers.builtin.stem:StemHandler",
    "swe": "agentroll.handlers.builtin.swe:SweHandler",
    "verifiers": "agentroll.handlers.builtin.verifiers_env:VerifiersHandler",
}


def _as_handler_class(obj: object, origin: str) -> type[AgentHandler]:
    if not (isinstance(obj, type) and issubclass(obj, AgentHandler)):
        raise RegistryError(f"{origin} is not an AgentHandler subclass: {obj!r}")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise RegistryError(
            f"{origin} ({obj.__module__}.{obj.__qualname__}) does not implement {missing}"
        )
    return obj


class HandlerRegistry:
    """Resolves handler names to shared handler instances (one per name, created lazily)."""

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

    def register(self, cls: type[AgentHandler], name: str | None = None) -> None:
        """Serve `cls` under `name` (default: `cls.name`); `DuplicateHandlerError` if taken,
        `RegistryError` if `cls` is not a complete `AgentHandler` subclass."""
        self._classes.register(name or cls.name, cls)

    def names(self) -> list[str]:
        """Every handler name known without a path, sorted."""
        return self._classes.names()

    def get(self, name: str) -> AgentHandler:
        """The shared handler for `name`; `UnknownHandlerError` or `RegistryError` if none."""
        handler = self._instances.get(name)
        if handler is None:
            handler = self._classes.get(name)()
            self._instances[name] = handler
        return handler
