"""Finding plugins by name: the one lookup idiom behind handlers, tool-call parsers and rules.

A `PluginRegistry[T]` resolves a name in this order:

1. an explicit registration (`register`);
2. the built-in table, name -> `module:attr` (imported on first use, so a process pays only
   for the plugins it uses);
3. the installed entry points of the registry's group, if it has one;
4. the name itself read as a `module:attr` path (attr may be dotted).

What a name resolves to passes the registry's `convert` (type check, instantiation) once and
is kept. A name claimed twice is an error, never a silent override: a second registration,
two entry points with one name, or an entry point that claims a built-in name. An unknown name
lists the known ones. The registry's owner picks the error types, so each keeps its own.
"""

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from agentroll.handlers.errors import RegistryError

T = TypeVar("T")


def load_object(path: str, error: Callable[[str], Exception] = RegistryError) -> object:
    """Import `module:attr` (attr may be dotted); `error(message)` is raised if it cannot be."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise error(f"not a 'module:Class' path: {path!r}")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"cannot import {module_name!r} (for {path!r}): {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise error(f"{module_name!r} has no attribute {attr!r}") from exc
    return obj


def discover_entry_points(
    group: str, duplicate: Callable[[str], Exception]
) -> dict[str, EntryPoint]:
    """Installed entry points of `group` by name; one name claimed twice raises `duplicate`."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name].value != ep.value:
            raise duplicate(
                f"entry point {ep.name!r} is declared twice: {found[ep.name].value} and {ep.value}"
            )
        found[ep.name] = ep
    return found


class PluginRegistry(Generic[T]):
    """Names to plugins of one kind, resolved in the order the module docstring gives.

    `kind` names the plugins in messages ("handler", "tool-call parser"). `convert(obj,
    origin)` checks or builds a plugin from what a registration, table entry, entry point or
    path names, raising with `origin` in the message where it cannot. `unknown(name, known)`
    and `duplicate(message)` build the errors for an unknown name and a name claimed twice;
    `load_error(message)` the one for a path that cannot be imported.
    """

    def __init__(
        self,
        kind: str,
        *,
        convert: Callable[[object, str], T],
        unknown: Callable[[str, list[str]], Exception],
        duplicate: Callable[[str], Exception],
        builtins: Mapping[str, str] | None = None,
        group: str | None = None,
        load_error: Callable[[str], Exception] = RegistryError,
    ) -> None:
        self.kind = kind
        self.builtins = dict(builtins or {})
        self.group = group
        self._convert = convert
        self._unknown = unknown
        self._duplicate = duplicate
        self._load_error = load_error
        self._explicit: dict[str, T] = {}
        self._loaded: dict[str, T] = {}
        self._entry_points: dict[str, EntryPoint] | None = None

    def register(self, name: str, plugin: T, *, replace: bool = False) -> None:
        """Make `name` mean `plugin`; with `replace`, over an earlier registration or a
        built-in (never silently)."""
        if not replace and (name in self._explicit or name in self.builtins):
            raise self._duplicate(f"{self.kind} {name!r} is already registered")
        self._explicit[name] = self._convert(plugin, f"{self.kind} {name!r}")

    def names(self) -> list[str]:
        """Every name known without a path: registered, built-in and entry points, sorted."""
        return sorted({*self._explicit, *self.builtins, *self._discovered()})

    def get(self, name: str) -> T:
        """The plugin `name` resolves to; the registry's `unknown` error if nothing does."""
        if name in self._explicit:
            return self._explicit[name]
        if name not in self._loaded:
            self._loaded[name] = self._resolve(name)
        return self._loaded[name]

    def _discovered(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            self._entry_points = (
                discover_entry_points(self.group, self._duplicate) if self.group else {}
            )
        return self._entry_points

    def _resolve(self, name: str) -> T:
        entry = self._discovered().get(name)
        if name in self.builtins:
            if entry is not None:
                raise self._duplicate(
                    f"entry point {entry.value!r} claims the built-in {self.kind} name {name!r}"
                )
            return self._convert(self._load(self.builtins[name]), f"built-in {name!r}")
        if entry is not None:
            return self._convert(entry.load(), f"entry point {name!r}")
        if ":" in name:
            return self._convert(self._load(name), repr(name))
        raise self._unknown(name, self.names())

    def _load(self, path: str) -> object:
        return load_object(path, self._load_error)
