"""Reading the readable `messages` view (OpenAI chat shape) the same way in every export.

The view is partly the policy's own writing (assistant text, tool-call names and arguments):
whatever it holds is read without failing, and kept as written."""

import json
from dataclasses import dataclass
from typing import Any

from agentroll.server.schema.messages import ChatMessage


def content_text(content: Any) -> str:
    """A message's content as text: OpenAI content parts joined by newlines, a part that is
    not text named `[type]`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'part')}]")
            else:
                pieces.append(str(part))
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False)


@dataclass(frozen=True)
class ToolCallView:
    index: int
    """Its position in the message's `tool_calls`."""
    call_id: str | None
    name: str
    arguments: Any
    """As the message holds it: OpenAI's JSON string, or whatever else was written."""

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


def tool_calls(message: ChatMessage | None) -> list[ToolCallView]:
    """The message's tool calls: every object in `tool_calls` (one without a `function`
    object, or a name that is not text, has an empty name; no arguments read as `{}`)."""
    views = []
    calls = message.get("tool_calls") if message else None
    for index, call in enumerate(calls or []):
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        call_id, name = call.get("id"), function.get("name")
        views.append(
            ToolCallView(
                index=index,
                call_id=call_id if isinstance(call_id, str) and call_id else None,
                name=name if isinstance(name, str) else "",
                arguments=function.get("arguments", "{}"),
            )
        )
    return views
