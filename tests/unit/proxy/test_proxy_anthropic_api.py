"""The Anthropic Messages shapes the proxy reads and writes.

`tests/fixtures/claude_code/requests.json` holds two requests Claude Code 2.1.330 really sent
(its first call and its fourth, after Bash, Read and Edit round trips; the tools trimmed to
those three)."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentroll.server.proxy.anthropic_api import AnthropicMessages, parse_messages
from agentroll.server.proxy.http11 import BadRequest, Request
from agentroll.server.proxy.wire import ChatReply, ChatRequest

FIXTURE = Path(__file__).parents[2] / "fixtures" / "claude_code" / "requests.json"
API = AnthropicMessages()
BASH = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def claude_code_requests() -> list[dict[str, Any]]:
    return list(json.loads(FIXTURE.read_text()))


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "policy", "max_tokens": 64, "messages": list(messages), **fields}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def request(target: str, payload: Any, headers: dict[str, str] | None = None) -> Request:
    path, _, query = target.partition("?")
    return Request("POST", path, headers or {}, json.dumps(payload).encode(), query)


def test_claude_codes_requests_become_the_conversation_it_means() -> None:
    first_raw, later_raw = claude_code_requests()
    first = API.parse(request(first_raw["target"], first_raw["body"]))
    later = API.parse(request(later_raw["target"], later_raw["body"]))
    assert API.matches("POST", first_raw["target"].partition("?")[0])
    assert API.credential(first_raw["headers"]) == "sk-test-key"
    assert (later.stream, later.max_tokens, later.model, later.parse_tools) == (
        True, 32000, "policy", True,
    )  # fmt: skip
    # The system field (two blocks) first, the user turn (two blocks), the environment that
    # Claude Code sends as a system message after it.
    system, task, environment = first.messages
    assert system["role"] == "system" and [p["type"] for p in system["content"]] == ["text"] * 2
    assert system["content"][0]["text"].startswith("You are a Claude agent")
    assert task["role"] == "user" and task["content"][1] == {
        "type": "text",
        "text": "Change hello to goodbye in a.txt",
    }
    assert environment["role"] == "system" and environment["content"].startswith("# Environment")
    # cache_control moves along with the latest turn: the history renders the same each call.
    assert later.messages[:3] == first.messages
    roles = [m["role"] for m in later.messages]
    assert roles == ["system", "user", "system"] + ["assistant", "tool"] * 3
    bash, _, edit = (m for m in later.messages if m["role"] == "assistant")
    assert bash == {
        "role": "assistant",
        "content": "  Let me act.\n",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {
                    "name": "Bash",
                    "arguments": '{"command": "ls -la", "description": "List files"}',
                },
            }
        ],
    }
    assert json.loads(edit["tool_calls"][0]["function"]["arguments"])["replace_all"] is False
    results = [m for m in later.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["name"]) for m in results] == [
        ("call_0_0", "Bash"), ("call_1_0", "Read"), ("call_2_0", "Edit"),
    ]  # fmt: skip
    assert results[1]["content"] == "1\thello\n2\t"
    names = [t["function"]["name"] for t in later.tools]
    assert names == ["Bash", "Edit", "Read"]
    edit_tool = later.tools[1]["function"]
    assert edit_tool["parameters"]["properties"]["replace_all"]["default"] is False
    assert later.tools[0]["type"] == "function" and edit_tool["description"]


def test_a_string_and_one_text_block_are_the_same_message() -> None:
    as_string = parse_messages(body(user("hi"), system="Be brief."))
    as_blocks = parse_messages(
        body(user([{"type": "text", "text": "hi"}]), system=[{"type": "text", "text": "Be brief."}])
    )
    assert (
        as_string.messages
        == as_blocks.messages
        == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ]
    )


def test_tool_results_become_tool_messages_before_the_users_text() -> None:
    calls = [
        {"type": "text", "text": "Two at once."},
        {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "pwd"}},
    ]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.txt"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_b",
            "content": [{"type": "text", "text": "/w"}, {"type": "text", "text": "ok"}],
            "is_error": True,
        },
        {"type": "text", "text": "<system-reminder>keep going</system-reminder>"},
    ]
    req = parse_messages(
        body(user("go"), {"role": "assistant", "content": calls}, user(results), tools=[BASH])
    )
    assert req.messages[1]["content"] == "Two at once."
    assert [c["id"] for c in req.messages[1]["tool_calls"]] == ["toolu_a", "toolu_b"]
    assert req.messages[2:] == [
        {"role": "tool", "content": "a.txt", "tool_call_id": "toolu_a", "name": "Bash"},
        {
            "role": "tool",
            "content": [{"type": "text", "text": "/w"}, {"type": "text", "text": "ok"}],
            "tool_call_id": "toolu_b",
            "name": "Bash",
        },
        {"role": "user", "content": "<system-reminder>keep going</system-reminder>"},
    ]
    only_calls = parse_messages(
        body(user("go"), {"role": "assistant", "content": calls[1:2]}, user(results[:1]))
    )
    assert only_calls.messages[1]["content"] is None  # as the proxy's own reply has it


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (body(user([{"type": "text", "text": "what is this"}, IMAGE])), "'image' content"),
        (
            body(user([{"type": "tool_result", "tool_use_id": "t", "content": [IMAGE]}])),
            "messages.0.content.0.content.0: 'image' content",
        ),
        (
            body(user([{"type": "document", "source": {"type": "text", "data": "x"}}])),
            "'document' content",
        ),
        (
            body(
                user("hi"),
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]},
                user("go on"),
            ),
            "'thinking' content",
        ),
        (
            body(user("news?"), tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            "'web_search_20250305'",
        ),
        (body(user("hi"), mcp_servers=[{"type": "url", "url": "x", "name": "m"}]), "MCP"),
        (body(user("hi"), thinking={"type": "enabled", "budget_tokens": 2048}), "thinking"),
        (
            body(user("hi"), context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}),
            "clear_tool_uses_20250919",
        ),
        (body(user("hi"), {"role": "assistant", "content": "Sure, "}), "prefill"),
    ],
)
def test_what_the_proxy_cannot_serve_is_refused_as_unsupported(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadRequest, match="not supported by this endpoint") as err:
        parse_messages(payload)
    assert message in str(err.value)
    assert API.error(err.value.status, str(err.value), "invalid_request_error") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": str(err.value)},
    }


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([user("hi")], "JSON object"),
        ({"model": "policy", "messages": [user("hi")]}, "max_tokens"),
        (body(user("hi"), max_tokens=True), "max_tokens"),
        (body(), "non-empty"),
        (body({"role": "tool", "content": "x"}), "messages.0.role"),
        (body(user(None)), "messages.0.content"),
        (body(user([{"type": "text"}])), "messages.0.content.0.text"),
        (body(user([{"text": "untyped"}])), "messages.0.content.0: a content block"),
        (
            body(user("x"), {"role": "assistant", "content": [{"type": "tool_use"}]}, user("y")),
            "id and a name",
        ),
        (
            body(
                user([{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t"}])
            ),
            "must come before",
        ),
        (body(user("x"), tools=[{"name": "Bash"}]), "input_schema"),
        (body(user("x"), stop_sequences="END"), "stop_sequences"),
    ],
)
def test_malformed_requests_say_what_is_wrong(payload: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_messages(payload)


def test_unknown_and_ignorable_fields_are_tolerated() -> None:
    plain = parse_messages(body(user("hi"), tools=[BASH], stop_sequences=["END"]))
    decorated_tool = {**BASH, "cache_control": {"type": "ephemeral"}, "strict": True}
    decorated = parse_messages(
        body(
            user([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]),
            tools=[{**decorated_tool, "type": "custom", "defer_loading": True}],
            stop_sequences=["END"],
            temperature=0.2,
            top_k=5,
            metadata={"user_id": "u"},
            service_tier="auto",
            output_config={"effort": "high"},
            thinking={"type": "adaptive"},
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            a_field_from_the_future={"x": 1},
        )
    )
    assert decorated == plain
    assert plain.stop == ["END"] and plain.include_usage
    no_tools = parse_messages(body(user("hi"), tools=[BASH], tool_choice={"type": "none"}))
    assert not no_tools.parse_tools


def turn(message: dict[str, Any], finish: str) -> ChatReply:
    return ChatReply("r-3", "policy", message, finish, prompt_tokens=40, completion_tokens=9)


TOOL_TURN = turn(
    {
        "role": "assistant",
        "content": "Looking first.\nThen fixing.",
        "tool_calls": [
            {
                "id": "call_3_0",
                "type": "function",
                "function": {"name": "Bash", "arguments": '{"command": "ls -la"}'},
            },
            {
                "id": "call_3_1",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path": "/w/é.txt"}'},
            },
        ],
    },
    "tool_calls",
)


def test_a_turn_is_a_message_with_its_tool_calls_as_tool_use_blocks() -> None:
    req = parse_messages(body(user("go"), model="claude-sonnet-4-5"))
    answer = API.answer(TOOL_TURN, req).body
    assert answer == {
        "id": "msg_r-3",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Looking first.\nThen fixing."},
            {"type": "tool_use", "id": "call_3_0", "name": "Bash", "input": {"command": "ls -la"}},
            {
                "type": "tool_use",
                "id": "call_3_1",
                "name": "Read",
                "input": {"file_path": "/w/é.txt"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 40,
            "output_tokens": 9,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    # What the harness sends back is the very turn the proxy returned.
    back = parse_messages(
        body(user("go"), {"role": "assistant", "content": answer["content"]}, user("next"))
    )
    assert back.messages[1] == TOOL_TURN.message
    for finish, reason in (("stop", "end_turn"), ("length", "max_tokens")):
        done = API.answer(turn({"role": "assistant", "content": "ok"}, finish), req).body
        assert (done["stop_reason"], done["content"]) == (reason, [{"type": "text", "text": "ok"}])
    empty = API.answer(turn({"role": "assistant", "content": ""}, "stop"), req).body
    assert empty["content"] == []


def replay(stream: bytes) -> dict[str, Any]:
    """An SSE stream put back together the way the Anthropic SDK does it."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for frame in stream.decode().split("\n\n"):
        if not frame:
            continue
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        event = json.loads(data_line[6:])
        assert event["type"] == name_line[7:]
        if event["type"] == "message_start":
            message = event["message"]
        elif event["type"] == "content_block_start":
            assert event["index"] == len(message["content"])
            message["content"].append(event["content_block"])
        elif event["type"] == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif event["type"] == "content_block_stop":
            if event["index"] in partial:
                message["content"][event["index"]]["input"] = json.loads(partial[event["index"]])
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
        else:
            assert event["type"] == "message_stop"
    return message


async def collect(events: Any) -> bytes:
    return b"".join([chunk async for chunk in events])


@pytest.mark.parametrize(
    "sampled",
    [
        TOOL_TURN,
        turn({"role": "assistant", "content": "line one\nline two\n\nend"}, "stop"),
        turn({"role": "assistant", "content": "cut off mid"}, "length"),
        turn(
            {"role": "assistant", "content": None, "tool_calls": TOOL_TURN.message["tool_calls"]},
            "tool_calls",
        ),
    ],
)
def test_a_streamed_turn_replays_into_the_same_message(sampled: ChatReply) -> None:
    plain = API.answer(sampled, parse_messages(body(user("go"))))
    streamed = API.answer(sampled, parse_messages(body(user("go"), stream=True)))
    assert plain.events is None and streamed.events is not None
    raw = asyncio.run(collect(streamed.events))
    assert raw.startswith(b"event: message_start\n") and raw.endswith(
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert replay(raw) == plain.body


def test_count_tokens_needs_no_max_tokens_and_answers_the_count() -> None:
    payload = {"model": "policy", "messages": [user("hi")], "tools": [BASH]}
    req = API.parse(request("/v1/messages/count_tokens?beta=true", payload))
    assert isinstance(req, ChatRequest) and req.count_only and req.max_tokens is None
    assert req.messages == [{"role": "user", "content": "hi"}]
    counted = turn({}, "stop")
    assert API.answer(counted, req).body == {"input_tokens": 40}
    assert not API.parse(request("/v1/messages", {**payload, "max_tokens": 5})).count_only
    with pytest.raises(BadRequest, match="max_tokens"):
        API.parse(request("/v1/messages", payload))


def test_routes_credentials_and_error_types() -> None:
    assert API.matches("POST", "/v1/messages") and API.matches("POST", "/messages")
    assert API.matches("POST", "/v1/messages/count_tokens")
    assert not API.matches("GET", "/v1/messages")
    assert not API.matches("POST", "/v1/messages/batches")
    assert API.credential({"x-api-key": "k1"}) == "k1"
    assert API.credential({"authorization": "Bearer k2"}) == "k2"
    assert API.credential({}) == ""
    kinds = {
        status: API.error(status, "m", "whatever")["error"]["type"]
        for status in (400, 401, 403, 404, 413, 429, 500, 503, 529)
    }
    assert kinds == {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        503: "api_error",
        529: "overloaded_error",
    }
