"""The policy's work as an OpenAI Responses `response` object, what a resources server grades.

    {"id": "resp_...", "object": "response", "created_at": ..., "model": ..., "status":
     "completed", "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
     "output": [{"type": "message", "role": "assistant", "status": "completed", "id": ...,
                 "content": [{"type": "output_text", "text": ..., "annotations": []}]},
                {"type": "function_call", "call_id": ..., "name": ..., "arguments": "{...}"},
                {"type": "function_call_output", "call_id": ..., "output": ...}, ...]}

`output` follows the conversation after its first prompt: each assistant turn's text as a
message and its tool calls as `function_call` items, each tool result as a
`function_call_output`; user turns (a follow-up asking for the answer) are not output. When
the policy ended by `submit`, its submitted answer closes `output` as a message; a
conversation the handler did not record (a harness behind the LLM proxy) gives a single
message with the answer.
"""

import itertools
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from agentroll.server.schema.messages import ChatMessage


def message_item(text: str, index: int) -> dict[str, Any]:
    return {
        "id": f"msg_{index}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _items(messages: Sequence[ChatMessage], counter: Iterator[int]) -> Iterator[dict[str, Any]]:
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "assistant":
            if isinstance(content, str) and content.strip():
                yield message_item(content, next(counter))
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                yield {
                    "id": f"fc_{next(counter)}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": str(call.get("id", "")),
                    "name": str(function.get("name", "")),
                    "arguments": str(function.get("arguments", "")),
                }
        elif role == "tool":
            yield {
                "type": "function_call_output",
                "call_id": str(message.get("tool_call_id", "")),
                "output": content if isinstance(content, str) else str(content),
            }


def response_object(
    conversation: Sequence[ChatMessage], submitted: str | None, answer: str, model: str
) -> dict[str, Any]:
    """`conversation`: the policy's messages after its first prompt; `submitted`: the answer
    it submitted, if it did; `answer`: what it answered in the end."""
    counter = itertools.count()
    output = list(_items(conversation, counter))
    if submitted is not None or not any(item["type"] == "message" for item in output):
        output.append(message_item(submitted if submitted is not None else answer, next(counter)))
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": output,
    }
