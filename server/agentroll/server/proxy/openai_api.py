"""The OpenAI wire format the proxy speaks to harnesses: requests in, objects and SSE out.

Only what matters for recording is taken from a request: messages (reduced to the fields a
chat template reads), tools, `max_tokens`/`max_completion_tokens`, `stop`, `stream`. The job's
own sampling parameters (temperature, top_p, seed, ...) always win: the trainer decides
what distribution the recorded logprobs come from, not the harness.
"""

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from agentroll.handlers import UnservableRequest
from agentroll.server.llm.poison import check_token_ids
from agentroll.server.proxy.http11 import BadRequest, Request, Response, error_body, json_bytes
from agentroll.server.proxy.wire import ChatReply, ChatRequest, bearer_or, check_stop
from agentroll.server.schema.messages import ChatMessage, ChatToolCall, ContentParts, Role, ToolSpec

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",  # what chat templates know it as
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    prompt_ids: list[int]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    stop: list[str]

    def __post_init__(self) -> None:
        check_stop(self.stop)


# Content parts OpenAI serves only to some models: the policy reads text alone, so these get
# the answer OpenAI gives a text-only model.
_MEDIA_PARTS = {"image_url", "input_audio", "audio", "file"}


def _content(value: Any, where: str) -> str | ContentParts | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: ContentParts = []
        for part in value:
            if not isinstance(part, dict):
                raise BadRequest(f"{where}: every content part must be an object")
            kind = part.get("type", "text")
            if kind in _MEDIA_PARTS:
                raise BadRequest(
                    f"Invalid content type. {kind} is only supported by certain models."
                )
            if kind != "text":
                raise BadRequest(f"{where}: Invalid value: {kind!r}. Supported values are: 'text'.")
            # Extras such as `cache_control` are dropped: they change nothing the model reads.
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        return parts
    raise BadRequest(f"{where}: content must be a string, null or a list of text parts")


def _arguments(value: Any) -> str:
    """A call's arguments as the proxy returns them: a JSON object in `json.dumps` form.

    Clients send a call back re-serialised (OpenCode and Qwen Code drop the spaces); the chat
    template would render those bytes, and the history would no longer start with the turn
    the chain recorded. An object is written back in one form (keys in the client's order),
    as vLLM renders it; anything else is kept as sent."""
    if not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python parses
        return value
    if not isinstance(parsed, dict):
        return value
    written = json.dumps(parsed, ensure_ascii=False)
    try:
        written.encode()
    except UnicodeEncodeError:  # a lone surrogate (`\ud800`) has no UTF-8 form: as sent
        return value
    return written


def _tool_call(call: Any, where: str) -> ChatToolCall:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise BadRequest(f"{where}: every tool call needs function.name")
    return {
        "id": str(call.get("id", "")),
        "type": "function",
        "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", "{}"))},
    }


def sanitize_message(raw: Any, index: int) -> ChatMessage:
    """The message as a chat template sees it; client-side extras (`extra`, provider
    fields, `function_call: null`, ...) are dropped so they cannot change the rendering."""
    where = f"messages[{index}]"
    role = _ROLES.get(str(raw.get("role"))) if isinstance(raw, dict) else None
    if role is None:
        raise BadRequest(f"{where}: needs a role among {sorted(_ROLES)}")
    message: ChatMessage = {"role": role, "content": _content(raw.get("content"), where)}
    calls = raw.get("tool_calls")
    if role == "assistant" and calls:
        message["tool_calls"] = [_tool_call(c, where) for c in calls]
    if role == "tool":
        message["tool_call_id"] = str(raw.get("tool_call_id", ""))
        if isinstance(raw.get("name"), str):
            message["name"] = raw["name"]
    return message


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise BadRequest("stop must be a string or a list of strings")


def _common(body: dict[str, Any]) -> tuple[bool, bool, int | None, list[str]]:
    if int(body.get("n") or 1) != 1:
        raise BadRequest("n must be 1: each rollout records one sample per call")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (type(limit) is not int or limit < 1):  # `true` is no count
        raise BadRequest("max_tokens must be a positive integer")
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    return bool(body.get("stream")), include_usage, limit, _stop(body.get("stop"))


def parse_chat(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("messages must be a non-empty list")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("tools must be a list of objects")
    stream, include_usage, limit, stop = _common(body)
    return ChatRequest(
        messages=[sanitize_message(m, i) for i, m in enumerate(raw_messages)],
        # As the client wrote them: the chat template renders the tools it was sent.
        tools=cast(list[ToolSpec], tools),
        parse_tools=bool(tools) and body.get("tool_choice") != "none",
        stream=stream,
        include_usage=include_usage,
        max_tokens=limit,
        stop=stop,
        model=str(body.get("model") or ""),
    )


def parse_completion(body: Any) -> CompletionRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if not (isinstance(prompt, list) and prompt):
        raise BadRequest(
            "prompt must be a list of token ids: a text prompt would be re-tokenized, and the "
            "recorded trajectory could then differ from what the model saw (use chat instead)"
        )
    try:  # what no engine can hold; each backend's vocabulary is checked before it is sent
        check_token_ids(prompt, None)
    except UnservableRequest as exc:
        raise BadRequest(str(exc)) from exc
    stream, include_usage, limit, stop = _common(body)
    return CompletionRequest(list(prompt), stream, include_usage, limit, stop)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def models_body(model: str) -> dict[str, Any]:
    card = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "agentroll"}
    return {"object": "list", "data": [card]}


def chat_body(
    call_id: str, model: str, message: ChatMessage, finish: str, counts: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": call_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": counts,
    }


def completion_body(
    call_id: str, model: str, text: str, finish: str, counts: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": call_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
        "usage": counts,
    }


def _event(obj: Any) -> bytes:
    return b"data: " + json_bytes(obj) + b"\n\n"


def text_pieces(text: str) -> list[str]:
    """Stream text line by line (a real stream arrives in several deltas)."""
    return [line for line in text.splitlines(keepends=True) if line] or ([text] if text else [])


async def chat_events(body: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A finished chat completion replayed as `chat.completion.chunk` events + `[DONE]`."""
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"]}
    base["model"] = body["model"]
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in text_pieces(message.get("content") or ""):
        yield chunk({"content": piece})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield _event({**base, "choices": [], "usage": body["usage"]})
    yield b"data: [DONE]\n\n"


async def completion_events(body: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    base = {"id": body["id"], "object": "text_completion", "created": body["created"]}
    base["model"] = body["model"]
    choice = body["choices"][0]
    for piece in text_pieces(choice["text"]):
        yield _event({**base, "choices": [{"index": 0, "text": piece, "finish_reason": None}]})
    yield _event(
        {**base, "choices": [{"index": 0, "text": "", "finish_reason": choice["finish_reason"]}]}
    )
    if include_usage:
        yield _event({**base, "choices": [], "usage": body["usage"]})
    yield b"data: [DONE]\n\n"


class OpenAIChat:
    """`POST /v1/chat/completions`, plain and streamed."""

    name = "openai_chat"

    def matches(self, method: str, path: str) -> bool:
        return method == "POST" and path.removeprefix("/v1") == "/chat/completions"

    def credential(self, headers: dict[str, str]) -> str:
        return bearer_or(headers, "api-key")

    def parse(self, request: Request) -> ChatRequest:
        return parse_chat(request.json())

    def answer(self, turn: ChatReply, request: ChatRequest) -> Response:
        counts = usage(turn.prompt_tokens, turn.completion_tokens)
        body = chat_body(f"chatcmpl-{turn.call_id}", turn.model, turn.message, turn.finish, counts)
        if request.stream:
            return Response(200, events=chat_events(body, request.include_usage))
        return Response(200, body)

    def error(
        self, status: int, message: str, type_: str, code: str | None = None
    ) -> dict[str, Any]:
        return error_body(status, message, type_, code)
