"""The OpenAI Responses API (`POST /v1/responses`, plain and streamed), as Codex CLI speaks it.

A request becomes a chat conversation: `instructions` a leading system message; `input` a
string (one user message) or a list of items: `message` (developer becomes system),
`function_call`/`custom_tool_call` (joined to the assistant turn they follow, as one message
with `tool_calls`), `function_call_output`/`custom_tool_call_output` (`tool` messages).
`reasoning` items are dropped (their content is encrypted for another model). Nothing is
stored, so what needs a stored object (`previous_response_id`, `item_reference`,
`conversation`, `prompt`) is refused the way the real service refuses an unknown id, and so
is `background` mode.

Tools: `function` tools become chat function tools; a freeform `custom` tool (Codex's
`apply_patch`) becomes a function with one string parameter `input`, and a call to it
comes back as a `custom_tool_call`; a `namespace`'s tools are offered by their own names,
and a call to one carries its namespace. Hosted tools (web search, file search, code
interpreter, ...) and non-text content (images, files, audio) are refused with 400 in the
OpenAI error envelope. Fields the proxy has no use for (`reasoning`, `include`, `store`,
`prompt_cache_key`, `client_metadata`, sampling knobs: the job's sampling wins) are ignored.

The mapping is a bijection on what the proxy itself returns: a turn it answered, replayed by
the client, parses back to the same assistant message, so the conversation renders to the
same tokens and the chain extends.
"""

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from agentroll.server.proxy.http11 import BadRequest, Request, Response, error_body, json_bytes
from agentroll.server.proxy.openai_api import text_pieces
from agentroll.server.proxy.wire import ChatReply, ChatRequest, bearer_or
from agentroll.server.schema.messages import (
    ChatMessage,
    ChatToolCall,
    ContentParts,
    FunctionSpec,
    Role,
    ToolSpec,
)

_ROLES: dict[str, Role] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
_TEXT_PARTS = {"input_text", "output_text", "text"}
_CALLS = {"function_call", "custom_tool_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
_STORED = {
    "previous_response_id": "Previous response with id '{}' not found.",
    "conversation": "Conversation with id '{}' not found.",
    "prompt": "Prompt with id '{}' not found.",
}
_NOT_STORED = " (this endpoint stores nothing: send the whole conversation as input)"
# What a response echoes from its request, and the value when the request left it out.
_ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "truncation": "disabled",
}


def _text(value: Any, where: str) -> str | ContentParts:
    """Message content (or a tool's output) as chat content: one text part is a string,
    several a list of parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise BadRequest(f"{where}: must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise BadRequest(
                f"{where}[{j}]: content of type {kind!r} is not supported with this "
                "model: it takes text only (input_text, output_text)"
            )
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _call(item: dict[str, Any], where: str) -> ChatToolCall:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise BadRequest(f"{where}: a {item['type']} needs a call_id and a name")
    if item["type"] == "custom_tool_call":
        if not isinstance(item.get("input"), str):
            raise BadRequest(f"{where}: a custom_tool_call needs its input as a string")
        # The arguments the proxy's tool-call parser wrote for this call, byte for byte.
        arguments = json.dumps({"input": item["input"]}, ensure_ascii=False)
    else:
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _conversation(items: list[Any]) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    joinable = False
    """Whether the last message is an assistant turn that a call item belongs to."""
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where}: every input item must be an object")
        kind = item.get("type", "message")  # an "easy" input message has no type
        if kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise BadRequest(f"{where}: needs a role among {sorted(_ROLES)}")
            content = _text(item.get("content"), f"{where}.content")
            messages.append({"role": role, "content": content})
            joinable = role == "assistant"
        elif kind in _CALLS:
            call = _call(item, where)
            if joinable:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                joinable = True
        elif kind in _OUTPUTS:
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}: a {kind} needs a call_id")
            content = _text(item.get("output"), f"{where}.output")
            messages.append({"role": "tool", "content": content, "tool_call_id": item["call_id"]})
            joinable = False
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise BadRequest(f"{where}: Item with id '{item.get('id')}' not found.{_NOT_STORED}")
        else:
            raise BadRequest(
                f"{where}: items of type {kind!r} are not supported with this model (supported: "
                "message, function_call, function_call_output, custom_tool_call, "
                "custom_tool_call_output, reasoning)"
            )
    return messages


class _Tools:
    """The request's tools as chat function tools, and what a call to each must look like."""

    def __init__(self, raw: Any) -> None:
        self.functions: list[ToolSpec] = []
        self.custom: set[str] = set()
        self.namespace: dict[str, str] = {}
        if raw is None:
            return
        if not isinstance(raw, list):
            raise BadRequest("tools must be a list of tools")
        for i, tool in enumerate(raw):
            self._add(tool, f"tools[{i}]", None)

    def _add(self, tool: Any, where: str, namespace: str | None) -> None:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace" and namespace is None and isinstance(tool.get("tools"), list):
            for j, inner in enumerate(tool["tools"]):
                self._add(inner, f"{where}.tools[{j}]", str(tool.get("name", "")))
            return
        if kind not in ("function", "custom"):
            raise BadRequest(
                f"{where}: hosted tool {kind!r} is not supported with this model (only "
                "function and custom tools are)"
            )
        if not isinstance(tool.get("name"), str):
            raise BadRequest(f"{where}: a {kind} tool needs a name")
        function: FunctionSpec = {"name": tool["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if kind == "custom":
            self.custom.add(tool["name"])
            function["parameters"] = _freeform_parameters(tool.get("format"))
        elif tool.get("parameters") is not None:
            function["parameters"] = tool["parameters"]
        if namespace is not None:
            self.namespace.setdefault(tool["name"], namespace)
        self.functions.append({"type": "function", "function": function})


def _freeform_parameters(form: Any) -> dict[str, Any]:
    """A freeform tool's input as one string parameter (a chat template knows only JSON
    arguments); its grammar, if any, goes into the parameter's description."""
    about = "The tool's raw input (not JSON)."
    if isinstance(form, dict) and isinstance(form.get("definition"), str):
        about += f" It follows this {form.get('syntax', '')} grammar:\n{form['definition']}"
    return {
        "type": "object",
        "properties": {"input": {"type": "string", "description": about}},
        "required": ["input"],
        "additionalProperties": False,
    }


def parse_responses(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    for key, message in _STORED.items():
        if body.get(key):
            ref = body[key].get("id") if isinstance(body[key], dict) else body[key]
            raise BadRequest(message.format(ref) + _NOT_STORED)
    if body.get("background"):
        raise BadRequest(
            "background responses are not supported: send the request in the foreground"
        )
    tools = _Tools(body.get("tools"))
    messages: list[ChatMessage] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("instructions must be a string")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages += _conversation(given)
    elif given is not None:
        raise BadRequest("input must be a string or a list of items")
    if not messages:
        raise BadRequest("the request has no input")
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise BadRequest("max_output_tokens must be a positive integer")
    echo = {key: body.get(key, default) for key, default in _ECHOED.items()}
    return ChatRequest(
        messages=messages,
        tools=tools.functions,
        parse_tools=bool(tools.functions) and body.get("tool_choice") != "none",
        stream=bool(body.get("stream")),
        include_usage=True,  # a response always reports its usage
        max_tokens=limit,
        stop=[],
        model=str(body.get("model") or ""),
        extra={"custom": tools.custom, "namespace": tools.namespace, "echo": echo},
    )


def _output_items(turn: ChatReply, request: ChatRequest, status: str) -> Iterator[dict[str, Any]]:
    message = turn.message
    if message.get("content") is not None:
        text = message["content"]
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield {
            "id": f"msg_{turn.call_id}",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [part],
        }
    custom, namespace = request.extra.get("custom", set()), request.extra.get("namespace", {})
    for k, call in enumerate(message.get("tool_calls") or []):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        freeform = _freeform_input(arguments) if name in custom else None
        if freeform is not None:
            yield {
                "id": f"ctc_{turn.call_id}_{k}",
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call["id"],
                "name": name,
                "input": freeform,
            }
            continue
        # A custom tool called with other arguments stays a function call: the client says
        # what is wrong with it, and the replayed call parses back to the same arguments.
        item = {
            "id": f"fc_{turn.call_id}_{k}",
            "type": "function_call",
            "status": "completed",
            "arguments": arguments,
            "call_id": call["id"],
            "name": name,
        }
        if name in namespace:
            item["namespace"] = namespace[name]
        yield item


def _freeform_input(arguments: str) -> str | None:
    """The input of a freeform call written as `{"input": "..."}`; None for anything else."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    if isinstance(value, dict) and list(value) == ["input"] and isinstance(value["input"], str):
        return value["input"]
    return None


def response_body(turn: ChatReply, request: ChatRequest) -> dict[str, Any]:
    truncated = turn.finish == "length"
    status = "incomplete" if truncated else "completed"
    return {
        "id": f"resp_{turn.call_id}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        **request.extra.get("echo", _ECHOED),
        "model": turn.model,
        "output": list(_output_items(turn, request, status)),
        "previous_response_id": None,
        "usage": {
            "input_tokens": turn.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": turn.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.prompt_tokens + turn.completion_tokens,
        },
    }


def _item_events(item: dict[str, Any], index: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events that stream one output item, from `output_item.added` to `.done`."""
    at = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind == "message":
        part = item["content"][0]
        opened = {**item, "status": "in_progress", "content": []}
        yield "response.output_item.added", {"output_index": index, "item": opened}
        empty = {**part, "text": ""}
        yield "response.content_part.added", {**at, "content_index": 0, "part": empty}
        for piece in text_pieces(part["text"]):
            delta = {**at, "content_index": 0, "delta": piece, "logprobs": []}
            yield "response.output_text.delta", delta
        done = {**at, "content_index": 0, "text": part["text"], "logprobs": []}
        yield "response.output_text.done", done
        yield "response.content_part.done", {**at, "content_index": 0, "part": part}
    elif kind == "function_call":
        opened = {**item, "status": "in_progress", "arguments": ""}
        yield "response.output_item.added", {"output_index": index, "item": opened}
        yield "response.function_call_arguments.delta", {**at, "delta": item["arguments"]}
        done = {**at, "name": item["name"], "arguments": item["arguments"]}
        yield "response.function_call_arguments.done", done
    else:
        opened = {**item, "status": "in_progress", "input": ""}
        yield "response.output_item.added", {"output_index": index, "item": opened}
        yield "response.custom_tool_call_input.delta", {**at, "delta": item["input"]}
        yield "response.custom_tool_call_input.done", {**at, "input": item["input"]}
    yield "response.output_item.done", {"output_index": index, "item": item}


async def response_events(body: dict[str, Any]) -> AsyncIterator[bytes]:
    """A finished response replayed as the Responses stream: `response.created`, each output
    item's events, then `response.completed` (or `response.incomplete`) with the body."""
    opened = {**body, "status": "in_progress", "incomplete_details": None, "output": []}
    opened["usage"] = None

    def events() -> Iterator[tuple[str, dict[str, Any]]]:
        yield "response.created", {"response": opened}
        yield "response.in_progress", {"response": opened}
        for index, item in enumerate(body["output"]):
            yield from _item_events(item, index)
        yield f"response.{body['status']}", {"response": body}

    for number, (kind, payload) in enumerate(events()):
        data = json_bytes({"type": kind, "sequence_number": number, **payload})
        yield f"event: {kind}\ndata: ".encode() + data + b"\n\n"


class OpenAIResponses:
    """`POST /v1/responses`, plain and streamed."""

    name = "openai_responses"

    def matches(self, method: str, path: str) -> bool:
        return method == "POST" and path.removeprefix("/v1") == "/responses"

    def credential(self, headers: dict[str, str]) -> str:
        return bearer_or(headers, "api-key")

    def parse(self, request: Request) -> ChatRequest:
        return parse_responses(request.json())

    def answer(self, turn: ChatReply, request: ChatRequest) -> Response:
        body = response_body(turn, request)
        if request.stream:
            return Response(200, events=response_events(body))
        return Response(200, body)

    def error(
        self, status: int, message: str, type_: str, code: str | None = None
    ) -> dict[str, Any]:
        return error_body(status, message, type_, code)
