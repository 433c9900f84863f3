"""Hermes / Qwen2.5 / Qwen3 calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

The format vLLM's `hermes` parser reads. Each call is one JSON object between the tags, usually
on its own line; a reply may hold several, with prose around them.

Forgiving where the intent is unambiguous, so the model is not punished for noise:
- a last call with no `</tool_call>` (a stop string at `</tool_call>` removes it) is accepted
  when its body is a complete JSON object; otherwise it is an error that names the missing tag;
- raw newlines inside JSON strings are accepted (models write code that way);
- `"parameters"` is accepted for `"arguments"`, a missing one means `{}`, and arguments sent as
  a JSON-encoded string are decoded.
Everything else malformed becomes an `errors` entry, and its markup leaves the content.
"""

import json
from collections.abc import Sequence

from agentroll.handlers.toolcalls._scan import (
    Region,
    ReplyBuilder,
    decode_json,
    name_and_arguments,
    scan,
)
from agentroll.handlers.toolcalls.base import ParsedReply, ToolCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


def parse_json_call(region: Region, n: int, close_tag: str = CLOSE) -> tuple[str, dict] | str:
    """Parse one `<tool_call>` body holding a JSON object; (name, arguments) or an error."""
    body = region.body.strip()
    if not body:
        missing = "" if region.closed else f" and has no {close_tag}"
        return f"tool call {n} is empty{missing}; put one JSON object inside the tags"
    obj, reason = decode_json(body)
    if reason is not None:
        if not region.closed:
            return (
                f"tool call {n} is not closed with {close_tag} and its JSON is incomplete: {reason}"
            )
        return f"tool call {n} is not valid JSON: {reason}"
    return name_and_arguments(obj, n)


class HermesParser:
    """Parser for `<tool_call>{json}</tool_call>` (registry name `hermes`, the default)."""

    name = "hermes"
    format_hint = (
        'Call a tool by writing <tool_call>\n{"name": "TOOL_NAME", "arguments": {"ARG": VALUE}}'
        "\n</tool_call> with valid JSON (one call per block)."
    )

    def parse(self, text: str) -> ParsedReply:
        out = ReplyBuilder()
        for region in scan(text, {OPEN: CLOSE}):
            if region.kind != "call":
                out.text(region.text)
                continue
            n = out.next_attempt()
            parsed = parse_json_call(region, n)
            if isinstance(parsed, str):
                out.errors.append(parsed)
            else:
                out.add_call(*parsed)
        return out.build()

    def render(self, calls: Sequence[ToolCall]) -> str:
        blocks = []
        for call in calls:
            obj = {"name": call.name, "arguments": call.arguments}
            blocks.append(f"{OPEN}\n{json.dumps(obj, ensure_ascii=False)}\n{CLOSE}")
        return "\n".join(blocks)

    def __repr__(self) -> str:
        return "HermesParser()"
