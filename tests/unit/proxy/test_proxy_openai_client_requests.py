"""OpenAI chat completions as OpenCode and Qwen Code speak it: their real requests, the
stream they parse, and the errors they get.

`tests/fixtures/openai_chat/` holds requests OpenCode 1.18.33 and Qwen Code 0.24.4 really sent
(captured against a logging stub; trimmed, see each file's `_about`)."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentroll.server.proxy.http11 import BadRequest, Request
from agentroll.server.proxy.openai_api import OpenAIChat, parse_chat
from agentroll.server.proxy.wire import ChatReply, ChatRequest

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openai_chat"
API = OpenAIChat()
USER = {"role": "user", "content": "Fix the bug."}


def captured(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text()))


def request(raw: dict[str, Any]) -> Request:
    return Request(raw["method"], raw["path"], raw["headers"], json.dumps(raw["body"]).encode())


def calls_of(chat: ChatRequest) -> list[tuple[str, str, str]]:
    return [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in chat.messages
        for c in m.get("tool_calls", [])
    ]


def test_opencodes_title_and_main_calls_become_the_conversations_they_mean() -> None:
    fixture = captured("opencode_1.18.33.json")
    title_raw, main_raw = fixture["title"], fixture["main_turn_7"]
    assert API.matches(main_raw["method"], main_raw["path"])
    assert API.credential({k.lower(): v for k, v in main_raw["headers"].items()}) == "sekrit-key"
    title, main = API.parse(request(title_raw)), API.parse(request(main_raw))
    # The title call offers no tools: its reply is never parsed for calls.
    assert (title.stream, title.include_usage, title.parse_tools, title.tools) == (
        True, True, False, [],
    )  # fmt: skip
    assert [m["role"] for m in title.messages] == ["system", "user", "user"]
    assert title.messages[0]["content"].startswith("You are a title generator")
    assert (main.stream, main.include_usage, main.max_tokens, main.model, main.parse_tools) == (
        True, True, 32000, "policy", True,
    )  # fmt: skip
    assert main.tools == main_raw["body"]["tools"]  # already the OpenAI shape: kept as sent
    assert [m["role"] for m in main.messages] == ["system", "user"] + ["assistant", "tool"] * 6
    # The instruction, read from stdin, verbatim.
    assert main.messages[1] == {"role": "user", "content": "Fix slug.py so it strips spaces."}
    # Arguments come back without spaces; they render as json.dumps wrote them.
    assert calls_of(main)[:1] == [("call_0", "grep", '{"pattern": "def slug"}')]
    assert calls_of(main)[4] == (
        "call_4",
        "edit",
        '{"filePath": "/repo/slug.py", "oldString": "s.lower()", "newString": "s.strip().lower()"}',
    )
    results = [m for m in main.messages if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == [f"call_{i}" for i in range(6)]
    assert results[3]["content"] == "' a '\n"


def test_qwen_codes_content_parts_and_tool_results_are_kept_as_text_parts() -> None:
    raw = captured("qwen_code_0.24.4.json")["main_turn_4"]
    chat = API.parse(request(raw))
    assert API.credential(raw["headers"]) == "sekrit-key"
    assert (chat.stream, chat.include_usage, chat.max_tokens, chat.parse_tools) == (
        True, True, 32000, True,
    )  # fmt: skip
    assert [m["role"] for m in chat.messages] == ["system", "user"] + ["assistant", "tool"] * 3
    task = chat.messages[1]["content"]
    assert [p["type"] for p in task] == ["text"] * 5
    assert task[0]["text"].startswith("<system-reminder>")
    assert task[-1] == {"type": "text", "text": "Fix slug.py so it strips spaces."}
    assert calls_of(chat)[0] == (
        "call_0",
        "run_shell_command",
        '{"command": "grep -rn \'def slug\' .", "description": "find it"}',
    )
    shell_output = chat.messages[3]
    assert shell_output["tool_call_id"] == "call_0"
    assert shell_output["content"][0]["text"].startswith("Command: grep -rn 'def slug' .")
    assert [t["function"]["name"] for t in chat.tools] == ["edit", "read_file", "run_shell_command"]


def test_part_extras_such_as_cache_control_change_nothing() -> None:
    plain = [{"type": "text", "text": "Fix it."}]
    marked = [{"type": "text", "text": "Fix it.", "cache_control": {"type": "ephemeral"}}]
    a = parse_chat({"messages": [{"role": "user", "content": plain}]})
    b = parse_chat({"messages": [{"role": "user", "content": marked}]})
    assert a.messages == b.messages == [{"role": "user", "content": plain}]


def test_fields_the_clients_add_are_tolerated_and_change_nothing() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    bare = parse_chat({"model": "policy", "messages": [USER], "tools": tools})
    extras = {
        "tool_choice": {"type": "function", "function": {"name": "bash"}},
        "parallel_tool_calls": True,
        "stream_options": {"include_usage": False},
        "temperature": 0.2,
        "top_p": 0.9,
        "reasoning_effort": "low",
        "metadata": {"session": "ses_1"},
        "user": "someone",
        "seed": 7,
        "providerOptions": {"x": 1},
    }
    rich = parse_chat({"model": "policy", "messages": [USER], "tools": tools, **extras})
    assert rich == bare
    assert parse_chat({"messages": [USER], "tools": tools, "tool_choice": "required"}).parse_tools


@pytest.mark.parametrize(
    ("sent", "rendered"),
    [
        ('{"command":"ls -la","timeout":10}', '{"command": "ls -la", "timeout": 10}'),
        ('{"b":1,"a":{"c":[1,2]}}', '{"b": 1, "a": {"c": [1, 2]}}'),  # the client's key order
        ('{"path":"caf\\u00e9"}', '{"path": "café"}'),  # as the proxy writes what it parsed
        ('{"command":"echo \\ud800"}', '{"command":"echo \\ud800"}'),  # no UTF-8 form: as sent
        ('{"command": "ls"', '{"command": "ls"'),  # not JSON: as sent
        ('["ls"]', '["ls"]'),  # not an object: as sent
        ("[" * 100_000 + "]" * 100_000, "[" * 100_000 + "]" * 100_000),  # too deep to parse
    ],
)
def test_echoed_arguments_render_as_the_proxy_writes_them(sent: str, rendered: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": sent}}
    chat = parse_chat(
        {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [call]}]}
    )
    assert calls_of(chat) == [("c1", "bash", rendered)]


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            [{"type": "text", "text": "What is this?"}, IMAGE],
            "Invalid content type. image_url is only supported by certain models.",
        ),
        ([AUDIO], "Invalid content type. input_audio is only supported by certain models."),
        (
            [{"type": "hologram"}],
            "messages[0]: Invalid value: 'hologram'. Supported values are: 'text'.",
        ),
        (["just a string"], "messages[0]: every content part must be an object"),
    ],
)
def test_content_the_policy_cannot_read_is_refused_as_openai_refuses_it(
    content: list[Any], message: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_chat({"messages": [{"role": "user", "content": content}]})
    assert (caught.value.status, str(caught.value)) == (400, message)
    assert API.error(400, message, "invalid_request_error") == {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[]", "the body must be a JSON object"),
        (b'{"messages": "hi"}', "messages must be a non-empty list"),
        (b'{"messages": [{"role": "user", "content": 7}]}', "content must be a string"),
        (b'{"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}', "tools must be"),
        (
            b'{"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}',
            "every tool call needs function.name",
        ),
    ],
)
def test_malformed_requests_say_why(body: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        API.parse(Request("POST", "/v1/chat/completions", {}, body))
    assert caught.value.status == 400


def reassembled(frames: list[bytes]) -> dict[str, Any]:
    """The stream put back together the way the openai SDK and the AI SDK do: content deltas
    appended, tool calls gathered by index (id and name from their first delta, arguments
    appended), the finish reason and the usage chunk's counts."""
    assert frames[-1] == b"data: [DONE]\n\n"
    events = [json.loads(f.removeprefix(b"data: ")) for f in frames[:-1]]
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    first = events[0]
    message: dict[str, Any] = {"role": first["choices"][0]["delta"]["role"], "content": None}
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for event in events:
        assert (event["id"], event["object"]) == (first["id"], "chat.completion.chunk")
        usage = event.get("usage") or usage
        for choice in event["choices"]:
            delta = choice["delta"]
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            for part in delta.get("tool_calls", []):
                empty = {"name": "", "arguments": ""}
                call = calls.setdefault(
                    part["index"], {"id": part["id"], "type": part["type"], "function": empty}
                )
                call["function"]["name"] += part["function"].get("name", "")
                call["function"]["arguments"] += part["function"].get("arguments", "")
            finish = choice["finish_reason"] or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "id": first["id"],
        "model": first["model"],
        "message": message,
        "finish": finish,
        "usage": usage,
    }


def call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_3_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


LOOK = [call(0, "read", {"filePath": "/repo/a.py"}), call(1, "bash", {"command": "ls"})]
EDIT = [call(0, "edit", {"oldString": "a"})]
TURNS = [
    ({"role": "assistant", "content": "Done.\nThe tests pass."}, "stop"),
    ({"role": "assistant", "content": "Let me look.\n", "tool_calls": LOOK}, "tool_calls"),
    ({"role": "assistant", "content": None, "tool_calls": EDIT}, "tool_calls"),
    ({"role": "assistant", "content": "I was cut off mid-sen"}, "length"),
]


@pytest.mark.parametrize(("message", "finish"), TURNS)
def test_the_stream_says_what_the_body_says(message: dict[str, Any], finish: str) -> None:
    turn = ChatReply("r-3", "policy", message, finish, prompt_tokens=120, completion_tokens=17)
    plain = API.answer(turn, parse_chat({"messages": [USER]}))
    usage = {"include_usage": True}
    streamed = API.answer(
        turn, parse_chat({"messages": [USER], "stream": True, "stream_options": usage})
    )
    assert plain.events is None and streamed.events is not None
    body = plain.body
    choice = body["choices"][0]
    assert (body["object"], choice["message"], choice["finish_reason"]) == (
        "chat.completion", message, finish,
    )  # fmt: skip
    assert body["usage"] == {"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137}

    async def frames() -> list[bytes]:
        assert streamed.events is not None
        return [f async for f in streamed.events]

    stream = reassembled(asyncio.run(frames()))
    assert stream == {
        "id": body["id"],
        "model": body["model"],
        "message": choice["message"],
        "finish": choice["finish_reason"],
        "usage": body["usage"],
    }


def test_usage_is_streamed_only_when_asked() -> None:
    turn = ChatReply("r-1", "policy", {"role": "assistant", "content": "Hi."}, "stop", 5, 2)
    response = API.answer(turn, parse_chat({"messages": [USER], "stream": True}))

    async def frames() -> list[bytes]:
        assert response.events is not None
        return [f async for f in response.events]

    assert reassembled(asyncio.run(frames()))["usage"] is None
