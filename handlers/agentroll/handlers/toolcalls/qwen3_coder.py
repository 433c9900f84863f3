"""Qwen3-Coder calls: XML-style blocks with one raw-text value per parameter.

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    VALUE
    </parameter>
    </function>
    </tool_call>

The format vLLM's `qwen3_coder` parser reads. Values are raw text, not JSON: one newline after
`<parameter=ARG>` and one before `</parameter>` belong to the markup and are dropped. Without
schemas a value that is valid JSON is decoded (`5` -> 5, `{"a": 1}` -> dict), anything else
stays a string. Given the tools' JSON schemas (`with_tools`), a parameter declared `string`
keeps its text verbatim and other declared types are checked; a mismatch is an error the model
can act on.

Forgiving where the intent is unambiguous: a missing `</function>` or a missing last
`</tool_call>` (stop strings remove them) is accepted, a bare `<function=...>` block without the
`<tool_call>` wrapper is accepted, and a Hermes JSON object inside `<tool_call>` is read as one.
A missing `</parameter>` is an error: where the value ends would be a guess.
"""

import json
import re
from collections.abc import Sequence
from typing import Any

from agentroll.handlers.toolcalls._scan import ReplyBuilder, scan
from agentroll.handlers.toolcalls.base import ParsedReply, ToolCall, ToolCallParser, ToolSchema
from agentroll.handlers.toolcalls.hermes import parse_json_call
from agentroll.handlers.toolcalls.schema import ParamTypes, convert_value, param_types

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNC_OPEN = "<function="
FUNC_CLOSE = "</function>"
PARAM_CLOSE = "</parameter>"
_FUNC = re.compile(r"<function=([^>\n]*)>")
# What may follow inside a function: a parameter, its end, or (end omitted) the next function.
_NEXT = re.compile(r"<parameter=([^>\n]*)>|</function>|<function=")


def _strip_markup_newlines(raw: str) -> str:
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


class Qwen3CoderParser:
    """Parser for Qwen3-Coder's `<function=..><parameter=..>` calls (registry `qwen3_coder`)."""

    name = "qwen3_coder"
    format_hint = (
        "Call a tool by writing <tool_call>\n<function=TOOL_NAME>\n<parameter=ARG>\nVALUE\n"
        "</parameter>\n</function>\n</tool_call> (one <parameter> block per argument)."
    )

    def __init__(self, tools: Sequence[ToolSchema] = ()) -> None:
        self._types: dict[str, ParamTypes] = param_types(tools)

    def with_tools(self, tools: Sequence[ToolSchema]) -> ToolCallParser:
        return Qwen3CoderParser(tools)

    def parse(self, text: str) -> ParsedReply:
        out = ReplyBuilder()
        for region in scan(text, {OPEN: CLOSE, FUNC_OPEN: FUNC_CLOSE}):
            if region.kind != "call":
                out.text(region.text)
            elif region.open_tag == FUNC_OPEN:
                self._functions(region.text, out)
            elif region.body.lstrip().startswith("{"):
                parsed = parse_json_call(region, out.next_attempt())
                if isinstance(parsed, str):
                    out.errors.append(parsed)
                else:
                    out.add_call(*parsed)
            else:
                self._functions(region.body, out)
        return out.build()

    def _functions(self, body: str, out: ReplyBuilder) -> None:
        pos = 0
        found = False
        while (m := _FUNC.search(body, pos)) is not None:
            found = True
            pos = self._function(body, m, out.next_attempt(), out)
        if not found:
            out.errors.append(
                f"tool call {out.next_attempt()} has no <function=TOOL_NAME> line; "
                "write <function=TOOL_NAME> ... </function> inside <tool_call>"
            )

    def _function(self, body: str, m: re.Match[str], n: int, out: ReplyBuilder) -> int:
        """Parse one function block; record a call or the first error; return where it ends."""
        name = m.group(1).strip()
        types = self._types.get(name, {})
        args: dict[str, Any] = {}
        error = None if name else f"tool call {n} has an empty name in <function=...>"
        pos = m.end()
        while True:
            nxt = _NEXT.search(body, pos)
            if nxt is None:
                pos = len(body)
                break
            if nxt.group() == FUNC_CLOSE:
                pos = nxt.end()
                break
            if nxt.group() == FUNC_OPEN:  # </function> omitted; the next call starts here
                pos = nxt.start()
                break
            pname = nxt.group(1).strip()
            close = body.find(PARAM_CLOSE, nxt.end())
            if close == -1:
                error = error or (
                    f"parameter {pname!r} of tool call {n} ({name}) is not closed with "
                    f"{PARAM_CLOSE}"
                )
                pos = len(body)
                break
            raw = _strip_markup_newlines(body[nxt.end() : close])
            pos = close + len(PARAM_CLOSE)
            if pname in args:
                error = error or f"tool call {n} ({name}) gives parameter {pname!r} twice"
                continue
            value, problem = convert_value(raw, types.get(pname))
            if problem is not None:
                error = error or f"parameter {pname!r} of tool call {n} ({name}) {problem}"
            args[pname] = value
        if error is None:
            out.add_call(name, args)
        else:
            out.errors.append(error)
        return pos

    def render(self, calls: Sequence[ToolCall]) -> str:
        """Write calls in this format; a string value containing `</parameter>` cannot be."""
        blocks = []
        for call in calls:
            params = "".join(
                f"<parameter={key}>\n{_value_text(value)}\n{PARAM_CLOSE}\n"
                for key, value in call.arguments.items()
            )
            blocks.append(f"{OPEN}\n<function={call.name}>\n{params}{FUNC_CLOSE}\n{CLOSE}")
        return "\n".join(blocks)

    def __repr__(self) -> str:
        return f"Qwen3CoderParser(tools={sorted(self._types)})"


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
