"""Finding handlers by name.

Lookup order: explicit registration, built-ins, the entry-point group `agentroll.handlers`,
then a `module:Class` path. A name claimed twice is an error, never a silent override.
"""

import importlib
from importlib.metadata import EntryPoint, entry_points

from agentroll.handlers.base import AgentHandler
from agentroll.handlers.errors import DuplicateHandlerError, RegistryError, UnknownHandlerError

ENTRY_POINT_GROUP = "agentroll.handlers"

BUILTIN_HANDLERS: dict[str, str] = {
    "code": "agentroll.handlers.builtin.code:CodeHandler",
    "harness": "agentroll.handlers.builtin.harness:HarnessHandler",
    "math": "agentroll.handlers.builtin.math:MathHandler",
    "stem": "agentroll.handlers.builtin.stem:StemHandler",
    "swe": "agentroll.handlers.builtin.swe:SweHandler",
}


def load_object(path: str) -> object:
    """Import `module:attr` (attr may be dotted)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"not a 'module:Class' path: {path!r}")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"cannot import {module_name!r} (for {path!r}): {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise RegistryError(f"{module_name!r} has no attribute {attr!r}") from exc
    return obj


def discover_entry_points(group: str, duplicate: type[RegistryError]) -> dict[str, EntryPoint]:
    """Installed entry points of `group` by name; one name claimed twice raises `duplicate`."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name].value != ep.value:
            raise duplicate(
                f"entry point {ep.name!r} is declared twice: {found[ep.name].value} and {ep.value}"
            )
        found[ep.name] = ep
    return found


def _as_handler_class(obj: object, origin: str) -> type[AgentHandler]:
    if not (isinstance(obj, type) and issubclass(obj, AgentHandler)):
        raise RegistryError(f"{origin} is not an AgentHandler subclass: {obj!r}")
    return obj


class HandlerRegistry:
    """Resolves handler names to shared handler instances (one per name, created lazily)."""

    def __init__(self) -> None:
        self._explicit: dict[str, type[AgentHandler]] = {}
        self._instances: dict[str, AgentHandler] = {}
        self._entry_points: dict[str, EntryPoint] | None = None

    def register(self, cls: type[AgentHandler], name: str | None = None) -> None:
        name = name or cls.name
        if name in self._explicit or name in BUILTIN_HANDLERS:
            raise DuplicateHandlerError(f"handler {name!r} is already registered")
        self._explicit[name] = _as_handler_class(cls, f"handler {name!r}")

    def _discovered(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            self._entry_points = discover_entry_points(ENTRY_POINT_GROUP, DuplicateHandlerError)
        return self._entry_points

    def names(self) -> list[str]:
        return sorted({*self._explicit, *BUILTIN_HANDLERS, *self._discovered()})

    def _resolve_class(self, name: str) -> type[AgentHandler]:
        if name in self._explicit:
            return self._explicit[name]
        entry = self._discovered().get(name)
        if name in BUILTIN_HANDLERS:
            if entry is not None:
                raise DuplicateHandlerError(
                    f"entry point {entry.value!r} claims the built-in handler name {name!r}"
                )
            return _as_handler_class(load_object(BUILTIN_HANDLERS[name]), f"built-in {name!r}")
        if entry is not None:
            return _as_handler_class(entry.load(), f"entry point {name!r}")
        if ":" in name:
            return _as_handler_class(load_object(name), repr(name))
        raise UnknownHandlerError(name, self.names())

    def get(self, name: str) -> AgentHandler:
        handler = self._instances.get(name)
        if handler is None:
            handler = self._resolve_class(name)()
            self._instances[name] = handler
        return handler
