"""What a tool-call parser returns, and the protocols a parser satisfies.

A parser turns the text of one assistant turn into a `ParsedReply`: the prose outside the call
markup, the well-formed calls in order, and one readable message per malformed call. Parsers
never raise on model output and never see tokens: the LLM session records the turn's token ids
before anything is parsed, so whatever a parser decides, the trajectory stays exact.

Call ids are deterministic per reply: `call_0`, `call_1`, ... in the order the well-formed
calls appear. A loop that wants ids unique across a whole conversation renames them with
`ParsedReply.with_call_ids(prefix)` (e.g. `f"call_{turn}_"`).

Errors are raised only for the caller's mistakes (unknown parser name, duplicate registration),
never for model output:

    RegistryError (agentroll.handlers.errors)
    ├── UnknownParserError(RegistryError, KeyError)
    └── DuplicateParserError(RegistryError, ValueError)
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from agentroll.handlers.errors import (
    DuplicateParserError,  # noqa: F401 (re-exported: its old import path)
    UnknownParserError,  # noqa: F401 (re-exported: its old import path)
)

ToolSchema = Mapping[str, Any]  # OpenAI form {"type": "function", "function": {...}} or bare


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: arguments are always a dict (possibly empty)."""

    name: str
    arguments: dict[str, Any]
    id: str

    def arguments_json(self) -> str:
        """The arguments as the JSON string OpenAI's `function.arguments` carries."""
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class ParsedReply:
    """One assistant reply split into prose, calls and readable errors for malformed calls."""

    content: str
    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every call attempt in the reply was well formed."""
        return not self.errors

    def with_call_ids(self, prefix: str) -> "ParsedReply":
        """The same reply with ids `{prefix}0`, `{prefix}1`, ... (order unchanged)."""
        calls = tuple(replace(c, id=f"{prefix}{i}") for i, c in enumerate(self.calls))
        return replace(self, calls=calls)


@runtime_checkable
class ToolCallParser(Protocol):
    """Splits one reply's text into content, calls and errors; never raises on model output."""

    name: str

    def parse(self, text: str) -> ParsedReply: ...


@runtime_checkable
class RendersToolCalls(Protocol):
    """Capability: write calls in the markup the model emits (scripted replies, round trips)."""

    def render(self, calls: Sequence[ToolCall]) -> str: ...


@runtime_checkable
class SchemaAwareParser(Protocol):
    """Capability: a parser whose format carries untyped text and can use the tools' schemas."""

    def with_tools(self, tools: Sequence[ToolSchema]) -> ToolCallParser: ...


def call_id(index: int) -> str:
    return f"call_{index}"
