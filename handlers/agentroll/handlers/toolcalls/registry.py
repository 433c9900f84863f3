"""Finding a tool-call parser by the name a job gives.

Lookup order (see `agentroll.handlers.plugins`): explicit registration, built-ins (imported
on first use), the entry-point group `agentroll.toolcall_parsers`, then a `module:attr` path
(attr: a parser instance, or a class built with no arguments). A name claimed twice is an
error, never a silent override; an unknown name lists the known ones. Names match vLLM's
`--tool-call-parser` values.
"""

from collections.abc import Sequence

from agentroll.handlers.errors import RegistryError
from agentroll.handlers.plugins import PluginRegistry
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
        self._parsers = PluginRegistry[ToolCallParser](
            "tool-call parser",
            convert=_as_parser,
            unknown=UnknownParserError,
            duplicate=DuplicateParserError,
            builtins=BUILTIN_PARSERS,
            group=ENTRY_POINT_GROUP,
        )

    def register(self, parser: ToolCallParser, name: str | None = None) -> None:
        """Serve `parser` under `name` (default: `parser.name`); `DuplicateParserError` if
        taken, `RegistryError` if it is not a parser."""
        self._parsers.register(name or str(getattr(parser, "name", "?")), parser)

    def names(self) -> list[str]:
        """Every parser name known without a path, sorted."""
        return self._parsers.names()

    def get(
        self, name: str = DEFAULT_PARSER, *, tools: Sequence[ToolSchema] | None = None
    ) -> ToolCallParser:
        """The parser for `name`; with `tools`, one that types arguments by their schemas
        where the format needs it (others ignore schemas: their arguments are typed JSON)."""
        parser = self._parsers.get(name)
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
    """Every parser name the process-wide registry knows without a path, sorted."""
    return _default.names()
