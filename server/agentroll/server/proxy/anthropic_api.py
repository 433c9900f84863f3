"""The Anthropic Messages API: `POST /v1/messages` (plain and streamed) and
`POST /v1/messages/count_tokens`, as the Anthropic SDKs and Claude Code speak them.

A request becomes a `ChatRequest` in the OpenAI chat shape: the `system` field is the first
message; text blocks become text (one block: a string, several: text parts); an assistant's
`tool_use` blocks become `tool_calls` (the tool_use id is the tool_call id, its input the
arguments' JSON); a user message's `tool_result` blocks become `tool` messages, in order,
followed by a user message with its other text. Messages with role `system` inside the list
(Claude Code sends its environment that way) stay system messages where they are. Tools
become OpenAI function tools (`input_schema` is the parameters' schema). `cache_control` is
dropped everywhere: it never changes what the model sees, and Claude Code moves it along.

What the model sees is what it was sampled on, so whatever would need the real service's own
machinery is refused with Anthropic's `invalid_request_error`: images and documents, server
tools and Anthropic-defined tools (a `tools` entry with a `type`, `mcp_servers`), tool search
references, thinking blocks and a thinking budget (`"type": "enabled"`: the proxy never
writes thinking blocks; `adaptive` and `disabled` are served, since a model that may think
may also not), context-management edits other than clearing thinking (of which there is
none), and a final assistant message (prefill). Sampling fields (`temperature`, `top_p`,
`top_k`) are ignored like every harness's: the job's sampling decides. Other unknown fields
are tolerated, as the real API tolerates them for its betas.

Replies: `end_turn`, `tool_use` or `max_tokens`; a streamed reply is the same message as
`message_start`, `content_block_*`, `message_delta` and `message_stop` events.
"""

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from agentroll.server.proxy.http11 import BadRequest, Request, Response, json_bytes
from agentroll.server.proxy.openai_api import text_pieces
from agentroll.server.proxy.wire import ChatReply, ChatRequest, bearer_or
from agentroll.server.schema.messages import (
    ChatMessage,
    ChatToolCall,
    ContentParts,
    FunctionCall,
    FunctionSpec,
    ToolSpec,
)

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ROLES = ("user", "assistant", "system")


def _unsupported(where: str, what: str) -> BadRequest:
    return BadRequest(f"{where}: {what} is not supported by this endpoint")


def _text_of(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise BadRequest(f"{where}.text: a text block needs its text as a string")
    return text


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where}: content must be a string or a list of content blocks")
    for j, block in enumerate(content):
        if not (isinstance(block, dict) and isinstance(block.get("type"), str)):
            raise BadRequest(f"{where}.{j}: a content block is an object with a type")
    return content


def _joined(texts: list[str]) -> str | ContentParts:
    """Text in the OpenAI shape: one block (or none) is a string, several are text parts."""
    if len(texts) <= 1:
        return "".join(texts)
    return [{"type": "text", "text": t} for t in texts]


def _only_text(content: Any, where: str) -> str | ContentParts:
    texts = []
    for j, block in enumerate(_blocks(content, where)):
        if block.get("type") != "text":
            raise _unsupported(f"{where}.{j}", f"{block.get('type')!r} content")
        texts.append(_text_of(block, f"{where}.{j}"))
    return _joined(texts)


def _assistant(content: Any, where: str, names: dict[str, str]) -> ChatMessage:
    texts: list[str] = []
    calls: list[ChatToolCall] = []
    for j, block in enumerate(_blocks(content, where)):
        kind, at = block.get("type"), f"{where}.{j}"
        if kind == "text":
            texts.append(_text_of(block, at))
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not (isinstance(call_id, str) and isinstance(name, str)):
                raise BadRequest(f"{at}: a tool_use block needs an id and a name")
            if not isinstance(arguments, dict):
                raise BadRequest(f"{at}.input: must be an object")
            names[call_id] = name
            fn: FunctionCall = {
                "name": name,
                "arguments": json.dumps(arguments, ensure_ascii=False),
            }
            calls.append({"id": call_id, "type": "function", "function": fn})
        else:
            raise _unsupported(at, f"{kind!r} content")
    # No text beside tool calls is null content, as in the proxy's own replies.
    text = _joined(texts) if texts or not calls else None
    message: ChatMessage = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(block: dict[str, Any], where: str, names: dict[str, str]) -> ChatMessage:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise BadRequest(f"{where}.tool_use_id: must be a string")
    result = block.get("content")
    text = "" if result is None else _only_text(result, f"{where}.content")
    message: ChatMessage = {"role": "tool", "content": text, "tool_call_id": call_id}
    if call_id in names:
        message["name"] = names[call_id]
    return message


def _user(
    content: Any, where: str, role: Literal["user", "system"], names: dict[str, str]
) -> list[ChatMessage]:
    """A user (or system) message: its tool results first, then its text, if any."""
    out: list[ChatMessage] = []
    texts: list[str] = []
    for j, block in enumerate(_blocks(content, where)):
        kind, at = block.get("type"), f"{where}.{j}"
        if kind == "tool_result" and role == "user":
            if texts:
                raise BadRequest(f"{at}: tool_result blocks must come before any other content")
            out.append(_tool_message(block, at, names))
        elif kind == "text":
            texts.append(_text_of(block, at))
        else:
            raise _unsupported(at, f"{kind!r} content")
    if texts or not out:
        out.append({"role": role, "content": _joined(texts)})
    return out


def _messages(body: dict[str, Any]) -> list[ChatMessage]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: must be a non-empty list")
    out: list[ChatMessage] = []
    system = body.get("system")
    if system is not None:
        text = _only_text(system, "system")
        if text:
            out.append({"role": "system", "content": text})
    names: dict[str, str] = {}
    for i, message in enumerate(raw):
        where = f"messages.{i}"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise BadRequest(f"{where}.role: must be one of {', '.join(_ROLES)}")
        content = message.get("content")
        if message["role"] == "assistant":
            if i == len(raw) - 1:
                raise _unsupported(where, "a final assistant message (prefill)")
            out.append(_assistant(content, f"{where}.content", names))
        else:
            role: Literal["user", "system"] = "system" if message["role"] == "system" else "user"
            out += _user(content, f"{where}.content", role, names)
    return out


def _tools(body: dict[str, Any]) -> list[ToolSpec]:
    raw = body.get("tools") or []
    if not isinstance(raw, list):
        raise BadRequest("tools: must be a list")
    if body.get("mcp_servers"):
        raise _unsupported("mcp_servers", "an MCP server connector (a server-side tool)")
    tools: list[ToolSpec] = []
    for i, tool in enumerate(raw):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise BadRequest(f"{where}: must be an object")
        if tool.get("type", "custom") != "custom":
            raise _unsupported(where, f"the server or Anthropic-defined tool {tool['type']!r}")
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not isinstance(schema, dict):
            raise BadRequest(f"{where}: a tool needs a name and an input_schema object")
        fn: FunctionSpec = {"name": name}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        fn["parameters"] = schema
        tools.append({"type": "function", "function": fn})
    return tools


def _check_features(body: dict[str, Any]) -> None:
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        raise _unsupported("thinking", "a thinking budget (no thinking blocks are written)")
    management = body.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    for i, edit in enumerate(edits if isinstance(edits, list) else []):
        kind = edit.get("type", "") if isinstance(edit, dict) else ""
        if not str(kind).startswith("clear_thinking"):
            raise _unsupported(f"context_management.edits.{i}", f"the edit {kind!r}")


def _stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise BadRequest("stop_sequences: must be a list of strings")


def parse_messages(body: Any, count_only: bool = False) -> ChatRequest:
    """A Messages request (or a count_tokens one, which needs no `max_tokens`)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    limit = body.get("max_tokens")
    if not count_only and (type(limit) is not int or limit < 1):
        raise BadRequest("max_tokens: a positive integer is required")
    _check_features(body)
    tools = _tools(body)
    choice = body.get("tool_choice")
    return ChatRequest(
        messages=_messages(body),
        tools=tools,
        parse_tools=bool(tools) and not (isinstance(choice, dict) and choice.get("type") == "none"),
        stream=bool(body.get("stream")) and not count_only,
        include_usage=True,
        max_tokens=None if count_only else limit,
        stop=_stop_sequences(body.get("stop_sequences")),
        model=str(body.get("model") or ""),
        count_only=count_only,
    )


def message_body(turn: ChatReply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    text = turn.message.get("content")
    if text:
        content.append({"type": "text", "text": text})
    for call in turn.message.get("tool_calls") or []:
        fn = call["function"]
        arguments = json.loads(fn["arguments"])
        content.append(
            {"type": "tool_use", "id": call["id"], "name": fn["name"], "input": arguments}
        )
    return {
        "id": f"msg_{turn.call_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS[turn.finish],
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.prompt_tokens,
            "output_tokens": turn.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    payload = json_bytes({"type": name, **data})
    return f"event: {name}\ndata: ".encode() + payload + b"\n\n"


def _block_deltas(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block as it starts (empty) and the deltas that fill it."""
    if block["type"] == "text":
        pieces = text_pieces(block["text"])
        return {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces]
    start = {**block, "input": {}}
    arguments = json.dumps(block["input"], ensure_ascii=False)
    return start, [{"type": "input_json_delta", "partial_json": arguments}]


async def message_events(body: dict[str, Any]) -> AsyncIterator[bytes]:
    """A finished message replayed as the Messages API's stream of events."""
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    yield _event("message_start", {"message": start})
    for index, block in enumerate(body["content"]):
        empty, deltas = _block_deltas(block)
        yield _event("content_block_start", {"index": index, "content_block": empty})
        for delta in deltas:
            yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
    yield _event("message_delta", {"delta": delta, "usage": usage})
    yield _event("message_stop", {})


class AnthropicMessages:
    """`POST /v1/messages` (plain and streamed) and `POST /v1/messages/count_tokens`."""

    name = "anthropic"

    def matches(self, method: str, path: str) -> bool:
        return method == "POST" and path.removeprefix("/v1") in (
            "/messages",
            "/messages/count_tokens",
        )

    def credential(self, headers: dict[str, str]) -> str:
        return bearer_or(headers, "x-api-key")

    def parse(self, request: Request) -> ChatRequest:
        count_only = request.path.endswith("/count_tokens")
        return parse_messages(request.json(), count_only)

    def answer(self, turn: ChatReply, request: ChatRequest) -> Response:
        if request.count_only:
            return Response(200, {"input_tokens": turn.prompt_tokens})
        body = message_body(turn, request.model or turn.model)
        if request.stream:
            return Response(200, events=message_events(body))
        return Response(200, body)

    def error(
        self, status: int, message: str, type_: str, code: str | None = None
    ) -> dict[str, Any]:
        """Anthropic's envelope; its error type follows from the status, as the API's does."""
        kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
