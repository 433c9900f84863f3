"""Parsed replies as OpenAI-style messages (the readable `messages` view) and error feedback.

These build the human-readable view only: the tokens the model sampled are recorded as they
were, and the observation sent back is tokenized as a new message.
"""

from collections.abc import Iterable

from agentroll.handlers.toolcalls.base import ParsedReply, ToolCall
from agentroll.server.schema.messages import ChatMessage, ChatToolCall


def openai_tool_call(call: ToolCall) -> ChatToolCall:
    """`{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json()},
    }


def assistant_message(reply: ParsedReply) -> ChatMessage:
    """The assistant message for the messages view; `tool_calls` only when there are calls."""
    message: ChatMessage = {"role": "assistant", "content": reply.content}
    if reply.calls:
        message["tool_calls"] = [openai_tool_call(c) for c in reply.calls]
    return message


def tool_message(call: ToolCall, content: str) -> ChatMessage:
    """The observation for one call, as the chat templates expect it."""
    return {"role": "tool", "content": content, "tool_call_id": call.id, "name": call.name}


def error_observation(
    errors: ParsedReply | Iterable[str], format_hint: str | None = None, *, max_items: int = 10
) -> str:
    """Text telling the model which calls were malformed and were not run, and how to fix them.

    `format_hint` is the parser's `format_hint` (each built-in parser has one). At most
    `max_items` errors are listed (degenerate replies can hold thousands). Returns "" when
    there is nothing to report.
    """
    items = list(errors.errors if isinstance(errors, ParsedReply) else errors)
    if not items:
        return ""
    lines = [
        "Some tool calls in your last message were malformed and were not run:",
        *(f"- {item}" for item in items[:max_items]),
    ]
    if len(items) > max_items:
        lines.append(f"- ... and {len(items) - max_items} more")
    if format_hint:
        lines.append(format_hint)
    return "\n".join(lines)
