"""The Google generateContent wire format (the Gemini API), as Gemini CLI and the genai SDKs
speak it.

    POST /v1beta/models/{model}:generateContent               one answer
    POST /v1beta/models/{model}:streamGenerateContent?alt=sse  `data: {...}` events
    (`/v1` and `/v1alpha` too, and `tunedModels/...`; a stream asked for without `alt=sse`
    comes as one JSON array of its chunks, as the real API sends it)

The key comes in `x-goog-api-key` (or as a bearer token). Request fields may be spelled in
camelCase or snake_case, as the real API's JSON mapping accepts both.

`contents` map onto the OpenAI chat shape: `systemInstruction` is the system message; a
`user` turn's text parts a user message (several parts stay a content array), its
`functionResponse` parts `tool` messages; a `model` turn one assistant message, its text
parts joined (a streamed answer comes back as its chunks' text, merged) and its
`functionCall` parts its tool calls. Thought parts are the model's reasoning summaries, not
its input: they are dropped. `tools[].functionDeclarations` become OpenAI tools
(`parametersJsonSchema`, else `parameters`, kept as sent).

Ids: a classic function call carries none. The proxy's answers name each call
(`functionCall.id`, which Gemini CLI echoes back in both the call and its response); a call
that comes without one is `call_{k}` (the k-th call of the conversation) and a response
without one answers the earliest open call of its name. The same history therefore always
maps to the same messages, and re-rendering it gives the same tokens.

Unsupported, answered `400 INVALID_ARGUMENT` as the real API answers what it cannot do:
images, audio, video and files (`inlineData`, `fileData`), server-side tools and code
execution, cached contents, non-text output, more than one candidate. `:countTokens` is not
served (`501 UNIMPLEMENTED`; Gemini CLI only counts media, and estimates when it cannot).
Unknown fields are ignored, so a newer client still works. The job's sampling parameters
win over `generationConfig`'s (temperature, topP, seed, thinking, ...); only
`maxOutputTokens` and `stopSequences` are taken.
"""

import json
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from agentroll.server.proxy.http11 import BadRequest, Request, Response, json_bytes
from agentroll.server.proxy.wire import ChatReply, ChatRequest, bearer_or
from agentroll.server.schema.messages import (
    ChatMessage,
    ChatToolCall,
    ContentParts,
    FunctionSpec,
    ToolSpec,
)

_PATH = re.compile(
    r"/v1(?:beta|alpha)?/(?:models|tunedModels)/(?P<model>[^/:]+)"
    r":(?P<method>generateContent|streamGenerateContent|countTokens)"
)
STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}
_MEDIA = ("inlineData", "fileData")
_SERVER_SIDE = ("executableCode", "codeExecutionResult")
_FINISH = {"length": "MAX_TOKENS"}


def _snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)


def field(obj: dict[str, Any], name: str) -> Any:
    """`obj[name]`, spelled camelCase or snake_case (the API's JSON mapping takes both)."""
    value = obj.get(name)
    return obj.get(_snake(name)) if value is None else value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list")
    return value


def _text(part: dict[str, Any], where: str) -> str:
    text = part["text"]
    if not isinstance(text, str):
        raise BadRequest(f"{where}.text must be a string")
    return text


def _kind(part: dict[str, Any], where: str) -> str:
    """Which data the part holds (`text`, `functionCall`, `functionResponse`, `thought`)."""
    if part.get("thought") is True:
        return "thought"
    for kind in ("text", "functionCall", "functionResponse"):
        if field(part, kind) is not None:
            return kind
    if any(field(part, name) is not None for name in _MEDIA):
        raise BadRequest(f"{where}: images, audio, video and files are not supported")
    if any(field(part, name) is not None for name in _SERVER_SIDE):
        raise BadRequest(f"{where}: server-side code execution is not supported")
    raise BadRequest(f"{where}: a part needs text, functionCall or functionResponse")


def _content_value(texts: list[str]) -> str | ContentParts:
    """One text part is a string; several stay a content array (the template joins them)."""
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _response_text(response: dict[str, Any]) -> str:
    """A function's result as the tool message's text: its `output` when that is all the
    response holds (the API's own convention), else the whole response as JSON."""
    output = response.get("output")
    if isinstance(output, str) and len(response) == 1:
        return output
    return json.dumps(response, ensure_ascii=False)


class _Calls:
    """Tool-call ids through one conversation (see the module docstring)."""

    def __init__(self) -> None:
        self.calls = 0
        self.answers = 0
        self.unanswered: list[tuple[str, str]] = []
        """(id, name) of each call no response has answered yet, oldest first."""

    def call(self, given: Any, name: str) -> str:
        call_id = given if isinstance(given, str) and given else f"call_{self.calls}"
        self.calls += 1
        self.unanswered.append((call_id, name))
        return call_id

    def answer(self, given: Any, name: str) -> str:
        self.answers += 1
        if isinstance(given, str) and given:
            self.unanswered = [c for c in self.unanswered if c[0] != given]
            return given
        match = next((c for c in self.unanswered if c[1] == name), None)
        if match is None:
            return f"response_{self.answers - 1}"
        self.unanswered.remove(match)
        return match[0]


def _function_call(part: dict[str, Any], calls: _Calls, where: str) -> ChatToolCall:
    fn = _object(field(part, "functionCall"), f"{where}.functionCall")
    name, args = fn.get("name"), fn.get("args") or {}
    if not isinstance(name, str) or not isinstance(args, dict):
        raise BadRequest(f"{where}.functionCall needs a name and an args object")
    arguments = json.dumps(args, ensure_ascii=False)
    call_id = calls.call(fn.get("id"), name)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _function_response(part: dict[str, Any], calls: _Calls, where: str) -> ChatMessage:
    fr = _object(field(part, "functionResponse"), f"{where}.functionResponse")
    name, response = fr.get("name"), fr.get("response") or {}
    if not isinstance(name, str) or not isinstance(response, dict):
        raise BadRequest(f"{where}.functionResponse needs a name and a response object")
    if fr.get("parts"):
        raise BadRequest(f"{where}: images, audio, video and files are not supported")
    call_id = calls.answer(fr.get("id"), name)
    return {
        "role": "tool",
        "content": _response_text(response),
        "tool_call_id": call_id,
        "name": name,
    }


def _model_turn(parts: list[dict[str, Any]], calls: _Calls, where: str) -> list[ChatMessage]:
    texts: list[str] = []
    tool_calls: list[ChatToolCall] = []
    for i, part in enumerate(parts):
        at = f"{where}.parts[{i}]"
        kind = _kind(part, at)
        if kind == "text":
            texts.append(_text(part, at))
        elif kind == "functionCall":
            tool_calls.append(_function_call(part, calls, at))
        elif kind == "functionResponse":
            raise BadRequest(f"{at}: a functionResponse belongs in a user turn")
    text = "".join(texts)
    message: ChatMessage = {
        "role": "assistant",
        "content": text if text or not tool_calls else None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    return [message]


def _user_turn(parts: list[dict[str, Any]], calls: _Calls, where: str) -> list[ChatMessage]:
    """Text parts in a row make one user message; each function response a tool message."""
    messages: list[ChatMessage] = []
    texts: list[str] = []
    for i, part in enumerate(parts):
        at = f"{where}.parts[{i}]"
        kind = _kind(part, at)
        if kind == "text":
            texts.append(_text(part, at))
        elif kind == "functionResponse":
            if texts:
                messages.append({"role": "user", "content": _content_value(texts)})
                texts = []
            messages.append(_function_response(part, calls, at))
        elif kind == "functionCall":
            raise BadRequest(f"{at}: a functionCall belongs in a model turn")
    if texts:
        messages.append({"role": "user", "content": _content_value(texts)})
    return messages


def _system(value: Any) -> list[ChatMessage]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}]
    parts = _list(_object(value, "systemInstruction").get("parts"), "systemInstruction.parts")
    texts = []
    for i, part in enumerate(parts):
        where = f"systemInstruction.parts[{i}]"
        if _kind(_object(part, where), where) != "text":
            raise BadRequest(f"{where}: a system instruction holds text only")
        texts.append(_text(part, where))
    return [{"role": "system", "content": _content_value(texts)}] if texts else []


def parse_contents(body: dict[str, Any]) -> list[ChatMessage]:
    """The conversation in the OpenAI chat shape."""
    contents = _list(field(body, "contents"), "contents")
    if not contents:
        raise BadRequest("contents is not specified")
    messages = _system(field(body, "systemInstruction"))
    calls = _Calls()
    for i, raw in enumerate(contents):
        where = f"contents[{i}]"
        content = _object(raw, where)
        role = content.get("role") or "user"
        parts = _list(content.get("parts"), f"{where}.parts")
        if not parts:
            raise BadRequest(f"{where}.parts must not be empty")
        parts = [_object(p, f"{where}.parts[{j}]") for j, p in enumerate(parts)]
        if role == "model":
            messages += _model_turn(parts, calls, where)
        elif role in ("user", "function"):
            messages += _user_turn(parts, calls, where)
        else:
            raise BadRequest(f"{where}.role must be 'user' or 'model', not {role!r}")
    return messages


def parse_tools(body: dict[str, Any]) -> list[ToolSpec]:
    """`tools[].functionDeclarations` as OpenAI tools; any other tool runs server-side."""
    tools: list[ToolSpec] = []
    for i, raw in enumerate(_list(field(body, "tools"), "tools")):
        tool = _object(raw, f"tools[{i}]")
        for key in tool:
            if key not in ("functionDeclarations", "function_declarations"):
                raise BadRequest(f"tools[{i}].{key}: server-side tools are not supported")
        declarations = _list(
            field(tool, "functionDeclarations"), f"tools[{i}].functionDeclarations"
        )
        for j, raw_fn in enumerate(declarations):
            fn = _object(raw_fn, f"tools[{i}].functionDeclarations[{j}]")
            if not isinstance(fn.get("name"), str):
                raise BadRequest(f"tools[{i}].functionDeclarations[{j}] needs a name")
            function: FunctionSpec = {"name": fn["name"]}
            if isinstance(fn.get("description"), str):
                function["description"] = fn["description"]
            schema = field(fn, "parametersJsonSchema")
            schema = field(fn, "parameters") if schema is None else schema
            if schema is not None:
                function["parameters"] = schema
            tools.append({"type": "function", "function": function})
    return tools


def _generation(body: dict[str, Any]) -> tuple[int | None, list[str]]:
    config = _object(field(body, "generationConfig") or {}, "generationConfig")
    if (field(config, "candidateCount") or 1) != 1:
        raise BadRequest("candidateCount must be 1: each rollout records one sample per call")
    modalities = _list(field(config, "responseModalities"), "responseModalities")
    if any(m != "TEXT" for m in modalities):
        raise BadRequest("only TEXT output is supported")
    limit = field(config, "maxOutputTokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BadRequest("maxOutputTokens must be a positive integer")
    stop = _list(field(config, "stopSequences"), "stopSequences")
    if not all(isinstance(s, str) for s in stop):
        raise BadRequest("stopSequences must be a list of strings")
    return limit, stop


def _tools_off(body: dict[str, Any]) -> bool:
    config = field(body, "toolConfig")
    calling = field(config, "functionCallingConfig") if isinstance(config, dict) else None
    return isinstance(calling, dict) and calling.get("mode") == "NONE"


def parse_generate(body: Any, model: str, stream: bool, array: bool) -> ChatRequest:
    """A generateContent request; `stream` for SSE, `array` for a stream sent as one array."""
    body = _object(body, "the body")
    if field(body, "cachedContent") is not None:
        raise BadRequest("cached contents are not supported")
    messages = parse_contents(body)
    tools = parse_tools(body)
    limit, stop = _generation(body)
    return ChatRequest(
        messages=messages,
        tools=tools,
        parse_tools=bool(tools) and not _tools_off(body),
        stream=stream,
        include_usage=True,
        max_tokens=limit,
        stop=stop,
        model=model,
        extra={"array": array},
    )


def _parts(message: ChatMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        args = json.loads(fn["arguments"])
        parts.append({"functionCall": {"id": call["id"], "name": fn["name"], "args": args}})
    return parts or [{"text": ""}]


def _chunk(turn: ChatReply, parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate]}
    if last:
        candidate["finishReason"] = _FINISH.get(turn.finish, "STOP")
        chunk["usageMetadata"] = {
            "promptTokenCount": turn.prompt_tokens,
            "candidatesTokenCount": turn.completion_tokens,
            "totalTokenCount": turn.prompt_tokens + turn.completion_tokens,
        }
    chunk["modelVersion"] = turn.model
    chunk["responseId"] = turn.call_id
    return chunk


def response_body(turn: ChatReply) -> dict[str, Any]:
    """The whole answer: one candidate, its finish reason, the token counts."""
    return _chunk(turn, _parts(turn.message), last=True)


def response_chunks(turn: ChatReply) -> list[dict[str, Any]]:
    """The answer as a stream sends it: text line by line, then each call; the last chunk
    carries the finish reason and the counts."""
    parts = _parts(turn.message)
    pieces: list[dict[str, Any]] = []
    for part in parts:
        text = part.get("text")
        lines = text.splitlines(keepends=True) if text else []
        pieces += [{"text": line} for line in lines] if lines else [part]
    return [_chunk(turn, [p], last=i == len(pieces) - 1) for i, p in enumerate(pieces)]


async def response_events(turn: ChatReply) -> AsyncIterator[bytes]:
    for chunk in response_chunks(turn):
        yield b"data: " + json_bytes(chunk) + b"\r\n\r\n"


def error_body(status: int, message: str) -> dict[str, Any]:
    """Google's error envelope (what the genai SDKs raise their `ApiError` from)."""
    name = STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": status, "message": message, "status": name}}


class GoogleGenerate:
    """`POST .../models/{model}:generateContent` and `:streamGenerateContent`."""

    name = "google"

    def matches(self, method: str, path: str) -> bool:
        return method == "POST" and _PATH.fullmatch(path) is not None

    def credential(self, headers: dict[str, str]) -> str:
        return bearer_or(headers, "x-goog-api-key")

    def parse(self, request: Request) -> ChatRequest:
        route = _PATH.fullmatch(request.path)
        if route is None:
            raise BadRequest(f"no route {request.path}", 404)
        if route["method"] == "countTokens":
            raise BadRequest("countTokens is not served by the rollout's proxy", 501)
        streamed = route["method"] == "streamGenerateContent"
        sse = streamed and "sse" in parse_qs(request.query).get("alt", [])
        return parse_generate(request.json(), route["model"], sse, streamed and not sse)

    def answer(self, turn: ChatReply, request: ChatRequest) -> Response:
        if request.stream:
            return Response(200, events=response_events(turn))
        if request.extra.get("array"):
            return Response(200, response_chunks(turn))
        return Response(200, response_body(turn))

    def error(
        self, status: int, message: str, type_: str, code: str | None = None
    ) -> dict[str, Any]:
        return error_body(status, message)
