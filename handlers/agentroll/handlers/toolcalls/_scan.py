"""Scanning shared by the parsers: reasoning blocks, call blocks, forgiving JSON, the result.

One left-to-right pass finds `<think>` blocks and call blocks, whichever opens first, so a
`<think>` inside a call's arguments is not mistaken for reasoning and a call written inside
reasoning is never executed. Known limit (shared with vLLM): an argument string holding the
literal close tag (`</tool_call>`, `</parameter>`) ends the call early.
"""

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentroll.handlers.toolcalls.base import ParsedReply, ToolCall, call_id

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_SNIPPET = 24  # characters either side of a JSON error shown to the model


@dataclass(frozen=True, slots=True)
class Region:
    kind: Literal["text", "think", "call"]
    text: str  # verbatim, tags included
    body: str = ""  # call regions: what lies between the tags
    open_tag: str = ""
    closed: bool = True


@functools.lru_cache(maxsize=16)
def _opener(tags: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(t) for t in tags))


def scan(text: str, call_tags: Mapping[str, str]) -> list[Region]:
    """Split `text` into text, reasoning and call regions (open tag -> close tag in call_tags).

    As vLLM's reasoning parsers do, a `</think>` with no `<think>` before it ends reasoning
    that began in the prompt: everything before it is reasoning, call markup included.
    """
    pattern = _opener((THINK_OPEN, *call_tags))
    regions: list[Region] = []
    pos = 0
    # Templates that put "<think>" in the generation prompt: the reply starts mid-reasoning.
    first_close = text.find(THINK_CLOSE)
    first_open = text.find(THINK_OPEN, 0, max(first_close, 0))
    if first_close != -1 and first_open == -1:
        pos = first_close + len(THINK_CLOSE)
        regions.append(Region("think", text[:pos]))
    while pos < len(text):
        m = pattern.search(text, pos)
        if m is None:
            regions.append(Region("text", text[pos:]))
            break
        if m.start() > pos:
            regions.append(Region("text", text[pos : m.start()]))
        tag = m.group()
        if tag == THINK_OPEN:
            close = text.find(THINK_CLOSE, m.end())
            end = len(text) if close == -1 else close + len(THINK_CLOSE)
            regions.append(Region("think", text[m.start() : end]))
        else:
            end = _add_call(text, m.start(), tag, call_tags[tag], regions)
        pos = end
    return regions


def _add_call(text: str, start: int, tag: str, close_tag: str, regions: list[Region]) -> int:
    # The first close tag ends the call, so argument strings may contain the open tag; a call
    # with no close tag runs to the end of the text.
    body_start = start + len(tag)
    close = text.find(close_tag, body_start)
    if close == -1:
        regions.append(Region("call", text[start:], text[body_start:], tag, closed=False))
        return len(text)
    end = close + len(close_tag)
    regions.append(Region("call", text[start:end], text[body_start:close], tag))
    return end


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


def decode_json(text: str) -> tuple[Any, str | None]:
    """(value, None) or (None, a readable reason). Raw newlines inside strings are accepted."""
    try:
        return json.loads(text, strict=False, parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, describe_json_error(text, exc)
    except RecursionError:
        return None, "it is nested too deeply"
    except ValueError as exc:  # NaN/Infinity, integers beyond Python's digit limit
        return None, str(exc)


def raw_decode(text: str, pos: int) -> tuple[Any, int, str | None]:
    """Decode one JSON value at `pos`: (value, end, None) or (None, where it broke, reason)."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
        return value, end, None
    except json.JSONDecodeError as exc:
        return None, exc.pos, describe_json_error(text, exc)
    except RecursionError:  # where it broke is unknown; rescanning the nesting would be quadratic
        return None, len(text), "it is nested too deeply"
    except ValueError as exc:
        return None, pos, str(exc)


_DECODER = json.JSONDecoder(strict=False, parse_constant=_reject_constant)


def describe_json_error(text: str, exc: json.JSONDecodeError) -> str:
    near = text[max(0, exc.pos - _SNIPPET) : exc.pos + _SNIPPET]
    return f"{exc.msg} at char {exc.pos} (near {near!r})"


def type_name(value: object) -> str:
    """The JSON name of a decoded value's type, for messages the model reads."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


@dataclass
class ReplyBuilder:
    """Collects content, calls and errors in reply order; numbers call attempts from 1.

    Removing a call's markup leaves the whitespace around it; where a call stood, the longer
    of the two whitespace runs beside it is kept, so "Sure.\n<call>\n<call>\nDone" reads
    "Sure.\nDone" rather than gaining blank lines.
    """

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    attempts: int = 0
    _segments: list[list[str]] = field(default_factory=lambda: [[]])

    def text(self, piece: str) -> None:
        self._segments[-1].append(piece)

    def next_attempt(self) -> int:
        """Start a call attempt (its markup splits the content) and return its number."""
        self.attempts += 1
        self._segments.append([])
        return self.attempts

    def add_call(self, name: str, arguments: dict[str, Any]) -> None:
        self.calls.append(ToolCall(name=name, arguments=arguments, id=call_id(len(self.calls))))

    def build(self) -> ParsedReply:
        parts: list[str] = []
        gap = ""  # whitespace waiting between the last kept text and the next
        for segment in self._segments:
            piece = "".join(segment)
            rest = piece.lstrip()
            gap = max(gap, piece[: len(piece) - len(rest)], key=len)
            core = rest.rstrip()
            if not core:
                continue
            if parts:
                parts.append(gap)
            parts.append(core)
            gap = rest[len(core) :]
        return ParsedReply("".join(parts), tuple(self.calls), tuple(self.errors))


def name_and_arguments(obj: Any, n: int) -> tuple[str, dict[str, Any]] | str:
    """Validate a decoded `{"name": ..., "arguments"|"parameters": {...}}` object.

    Returns (name, arguments) or a readable error. Missing arguments mean `{}`; arguments given
    as a JSON-encoded string (OpenAI wire style) are decoded.
    """
    if not isinstance(obj, dict):
        return (
            f'tool call {n} must be a JSON object like {{"name": ..., "arguments": {{...}}}}, '
            f"got {type_name(obj)}"
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'tool call {n} has no "name" string naming the tool to call'
    key = "arguments" if "arguments" in obj else "parameters"
    args = obj.get(key, {})
    if isinstance(args, str):
        decoded, reason = decode_json(args) if args.strip() else ({}, None)
        if reason is not None or not isinstance(decoded, dict):
            return f'tool call {n} ({name}): "{key}" must be a JSON object, got a string'
        args = decoded
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'tool call {n} ({name}): "{key}" must be a JSON object, got {type_name(args)}'
    return name.strip(), args
