"""Finding a tool-call parser by the name a job gives.

Lookup order: explicit registration, built-ins (imported on first use), the entry-point group
`agentroll.toolcall_parsers`, then a `module:attr` path (attr: a parser instance, or a class
built with no arguments). A name claimed twice is an error, never a silent override; an unknown
name lists the known ones. Names match vLLM's `--tool-call-parser` values.
"""

from collections.abc import Sequence
from importlib.metadata import EntryPoint

from agentroll.handlers.errors import RegistryError
from agentroll.handlers.registry import discover_entry_points, load_object
from agentroll.handlers.toolcalls.base import (
    DuplicateParserError,
    SchemaAwareParser,
    ToolCallParser,
    ToolSchema,
    UnknownParserError,
)

ENTRY_POINT_GROUP = "agentroll.toolcall_parsers"
DEFAULT_PARSER = "hermes"

BUILTIN_PARSERS: dict[str, str] = {
    "hermes": "agentroll.handlers.toolcalls.hermes:HermesParser",
    "llama3_json": "agentroll.handlers.toolcalls.llama3_json:Llama3JsonParser",
    "qwen3_coder": "agentroll.handlers.toolcalls.qwen3_coder:Qwen3CoderParser",
}


def _as_parser(obj: object, origin: str) -> ToolCallParser:
    if isinstance(obj, type):
        cls = obj
        try:
            obj = cls()
        except TypeError as exc:
            raise RegistryError(f"{origin}: cannot build {cls.__name__}() ({exc})") from exc
    if not (isinstance(obj, ToolCallParser) and isinstance(getattr(obj, "name", None), str)):
        raise RegistryError(f"{origin} is not a tool-call parser (needs .name and .parse): {obj!r}")
    return obj


class ParserRegistry:
    """Resolves parser names to shared parser instances (parsers hold no per-reply state)."""

    def __init__(self) -> None:
        self._explicit: dict[str, ToolCallParser] = {}
        self._loaded: dict[str, ToolCallParser] = {}
        self._entry_points: dict[str, EntryPoint] | None = None

    def register(self, parser: ToolCallParser, name: str | None = None) -> None:
        parser = _as_parser(parser, f"parser {name or getattr(parser, 'name', '?')!r}")
        name = name or parser.name
        if name in self._explicit or name in BUILTIN_PARSERS:
            raise DuplicateParserError(f"tool-call parser {name!r} is already registered")
        self._explicit[name] = parser

    def _discovered(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            self._entry_points = discover_entry_points(ENTRY_POINT_GROUP, DuplicateParserError)
        return self._entry_points

    def names(self) -> list[str]:
        return sorted({*self._explicit, *BUILTIN_PARSERS, *self._discovered()})

    def _resolve(self, name: str) -> ToolCallParser:
        if name in self._explicit:
            return self._explicit[name]
        if name in self._loaded:
            return self._loaded[name]
        entry = self._discovered().get(name)
        if name in BUILTIN_PARSERS:
            if entry is not None:
                raise DuplicateParserError(
                    f"entry point {entry.value!r} claims the built-in parser name {name!r}"
                )
            parser = _as_parser(load_object(BUILTIN_PARSERS[name]), f"built-in {name!r}")
        elif entry is not None:
            parser = _as_parser(entry.load(), f"entry point {name!r}")
        elif ":" in name:
            parser = _as_parser(load_object(name), repr(name))
        else:
            raise UnknownParserError(name, self.names())
        self._loaded[name] = parser
        return parser

    def get(
        self, name: str = DEFAULT_PARSER, *, tools: Sequence[ToolSchema] | None = None
    ) -> ToolCallParser:
        """The parser for `name`; with `tools`, one that types arguments by their schemas
        where the format needs it (others ignore schemas: their arguments are typed JSON)."""
        parser = self._resolve(name)
        if tools and isinstance(parser, SchemaAwareParser):
            return parser.with_tools(tools)
        return parser


_default = ParserRegistry()


def get_parser(
    name: str = DEFAULT_PARSER, *, tools: Sequence[ToolSchema] | None = None
) -> ToolCallParser:
    """The parser a job names (default `hermes`) from the process-wide registry."""
    return _default.get(name, tools=tools)


def register_parser(parser: ToolCallParser, name: str | None = None) -> None:
    """Register a third-party parser process-wide under `name` (default: `parser.name`)."""
    _default.register(parser, name)


def parser_names() -> list[str]:
    return _default.names()
