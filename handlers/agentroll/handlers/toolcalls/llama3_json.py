"""Llama 3.1-3.3 JSON calls: `{"name": ..., "parameters": {...}}`, optionally after a tag.

The format vLLM's `llama3_json` parser reads: a JSON object per call, `"parameters"` (or
`"arguments"`) holding the arguments, several calls separated by `;`, the whole optionally
preceded by `<|python_tag|>`. There is no closing markup, so which text is a call is decided
like this:
- after `<|python_tag|>` everything up to the end of the `;`-separated objects is a call
  attempt, and what does not parse (e.g. a built-in `brave_search.call(...)`) is an error;
- elsewhere, an object is a call attempt when it opens with `{"name":` or `{"type":`; one that
  decodes to an object without a `"name"` string is ordinary content (the model wrote JSON),
  and one that does not decode is an error (the model tried to call and broke the JSON).
"""

import json
import re
from collections.abc import Sequence

from agentroll.handlers.toolcalls._scan import ReplyBuilder, name_and_arguments, raw_decode, scan
from agentroll.handlers.toolcalls.base import ParsedReply, ToolCall

PYTHON_TAG = "<|python_tag|>"
_CANDIDATE = re.compile(r'<\|python_tag\|>|\{\s*"(?:name|type)"\s*:')
_SPACE = re.compile(r"\s*")


def _skip_space(text: str, pos: int) -> int:
    m = _SPACE.match(text, pos)
    return pos if m is None else m.end()


class Llama3JsonParser:
    """Parser for Llama 3 JSON tool calls (registry name `llama3_json`)."""

    name = "llama3_json"
    format_hint = (
        'Call a tool by replying with {"name": "TOOL_NAME", "parameters": {"ARG": VALUE}} in '
        "valid JSON; separate several calls with ';'."
    )

    def parse(self, text: str) -> ParsedReply:
        out = ReplyBuilder()
        for region in scan(text, {}):  # no call tags: only reasoning blocks are set aside
            if region.kind == "think":
                out.text(region.text)
            else:
                self._parse_text(region.text, out)
        return out.build()

    def _parse_text(self, text: str, out: ReplyBuilder) -> None:
        pos = 0
        while (m := _CANDIDATE.search(text, pos)) is not None:
            out.text(text[pos : m.start()])
            tagged = m.group() == PYTHON_TAG
            pos = self._sequence(text, m.end() if tagged else m.start(), tagged, out)
        out.text(text[pos:])

    def _sequence(self, text: str, pos: int, tagged: bool, out: ReplyBuilder) -> int:
        """Read `;`-separated call objects from `pos`; return where the calls end."""
        first = True
        while True:
            start = _skip_space(text, pos)
            if start >= len(text) or text[start] != "{":
                if first:  # only reachable right after <|python_tag|>
                    n = out.next_attempt()
                    out.errors.append(
                        f"tool call {n} after {PYTHON_TAG} is not a JSON object; "
                        'write {"name": "TOOL_NAME", "parameters": {...}}'
                    )
                    return len(text)
                return pos
            value, end, reason = raw_decode(text, start)
            if reason is not None:
                n = out.next_attempt()
                out.errors.append(f"tool call {n} is not valid JSON: {reason}")
                # Resume after the break: objects nested in a broken call are not calls, and
                # rescanning them would make degenerate repetitive output quadratic.
                nxt = _CANDIDATE.search(text, max(end, start + 1))
                return len(text) if nxt is None else nxt.start()
            if not tagged and not (isinstance(value, dict) and isinstance(value.get("name"), str)):
                out.text(text[start:end])  # plain JSON in the prose, not a call
                return end
            parsed = name_and_arguments(value, out.next_attempt())
            if isinstance(parsed, str):
                out.errors.append(parsed)
            else:
                out.add_call(*parsed)
            first = False
            after = _skip_space(text, end)
            if after >= len(text) or text[after] != ";":
                return end
            pos = after + 1

    def render(self, calls: Sequence[ToolCall]) -> str:
        return "; ".join(
            json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False)
            for c in calls
        )

    def __repr__(self) -> str:
        return "Llama3JsonParser()"
