"""The OpenAI Responses shapes the proxy reads and writes: requests as Codex CLI sends them,
answers as the real service streams them, and the round trip that keeps a chain exact."""

import json
from pathlib import Path
from typing import Any

import pytest

from agentroll.server.proxy.http11 import BadRequest, Request
from agentroll.server.proxy.responses_api import (
    OpenAIResponses,
    parse_responses,
    response_body,
    response_events,
)
from agentroll.server.proxy.wire import ChatReply, ChatRequest

CODEX = Path(__file__).parents[2] / "fixtures" / "wire" / "codex-0.169.0-responses.json"
PATCH = "*** Begin Patch\n*** Update File: a.txt\n@@\n-old line\n+new line\n*** End Patch\n"
EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"},
}
SUBAGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "wait_agent", "parameters": {"type": "object"}}],
}


def codex_body() -> dict[str, Any]:
    return dict(json.loads(CODEX.read_text())["body"])


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def request(**fields: Any) -> ChatRequest:
    return parse_responses({"model": "policy", "input": [user("hi")], **fields})


def turn(
    content: str | None, *calls: tuple[str, dict[str, Any]], finish: str = "stop"
) -> ChatReply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_3_{k}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for k, (name, args) in enumerate(calls)
        ]
    return ChatReply("roll-3", "policy", message, finish, prompt_tokens=40, completion_tokens=9)


def test_a_codex_request_becomes_the_chat_conversation_it_stands_for() -> None:
    req = parse_responses(codex_body())
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "system", "user", "user", "assistant", "tool", "assistant", "tool"]
    assert req.messages[0]["content"].startswith("You are Codex")
    # Two text parts in one developer message stay two parts.
    assert [p["type"] for p in req.messages[1]["content"]] == ["text", "text"]
    assert req.messages[3]["content"] == "Change old to new in a.txt"
    # The assistant's text and its call are one turn, as the proxy answered them.
    assert req.messages[4] == {
        "role": "assistant",
        "content": "Let me look at the file.",
        "tool_calls": [
            {
                "id": "call_0_1",
                "type": "function",
                "function": {"name": "exec_command", "arguments": '{"cmd": "cat a.txt"}'},
            }
        ],
    }
    assert req.messages[5]["tool_call_id"] == "call_0_1"
    assert req.messages[5]["content"].endswith("Output:\nold line\n")
    # The freeform apply_patch call reads back as the JSON arguments a parser writes.
    patch_call = req.messages[6]["tool_calls"][0]
    assert req.messages[6]["content"] is None
    assert json.loads(patch_call["function"]["arguments"]) == {"input": PATCH}
    assert req.messages[7]["tool_call_id"] == patch_call["id"] == "call_1_0"
    names = [t["function"]["name"] for t in req.tools]
    assert names == [
        "exec_command",
        "write_stdin",
        "request_user_input",
        "apply_patch",
        "view_image",
    ]
    assert all(t["type"] == "function" and "strict" not in t["function"] for t in req.tools)
    patch_tool = req.tools[3]["function"]
    assert patch_tool["parameters"]["required"] == ["input"]
    assert "lark grammar" in patch_tool["parameters"]["properties"]["input"]["description"]
    assert (req.stream, req.parse_tools, req.max_tokens, req.model) == (True, True, None, "gpt-5.5")
    assert req.extra["custom"] == {"apply_patch"}


def test_instructions_a_string_input_and_limits() -> None:
    req = parse_responses(
        {"instructions": "Be brief.", "input": "hello", "max_output_tokens": 64, "tools": [EXEC]}
    )
    assert req.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert (req.max_tokens, req.stream, req.stop, req.parse_tools) == (64, False, [], True)
    assert not request(tools=[EXEC], tool_choice="none").parse_tools


def test_unknown_fields_and_reasoning_items_are_tolerated() -> None:
    req = request(
        input=[
            {"role": "user", "content": "plain message", "id": "m1", "status": "done", "x": 1},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "no"}],
            },
        ],
        client_metadata={"a": "b"},
        prompt_cache_key="k",
        include=["reasoning.encrypted_content"],
        store=False,
        reasoning={"effort": "high"},
        temperature=0.2,
        text={"verbosity": "low"},
        some_future_field={"anything": True},
    )
    assert req.messages == [
        {"role": "user", "content": "plain message"},
        {"role": "assistant", "content": "no"},
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "JSON object"),
        ({"model": "policy"}, "no input"),
        ({"input": 3}, "string or a list"),
        ({"input": [user("x")], "instructions": ["x"]}, "instructions must be a string"),
        ({"input": ["text"]}, "must be an object"),
        ({"input": [{"role": "robot", "content": "x"}]}, "needs a role"),
        ({"input": [{"role": "user", "content": 5}]}, "list of content parts"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "needs a call_id and a name"),
        ({"input": [{"type": "custom_tool_call", "name": "f", "call_id": "c"}]}, "input"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "needs a call_id"),
        ({"input": [{"type": "bogus"}]}, "'bogus' are not supported"),
        ({"input": "x", "max_output_tokens": 0}, "positive integer"),
        ({"input": "x", "tools": {"type": "function"}}, "tools must be a list"),
        ({"input": "x", "tools": [{"type": "function"}]}, "needs a name"),
        ({"input": "x", "previous_response_id": "resp_1"}, "resp_1' not found"),
        ({"input": "x", "conversation": {"id": "conv_1"}}, "conv_1' not found"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "msg_1' not found"),
        ({"input": "x", "background": True}, "background"),
    ],
)
def test_malformed_requests_say_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_responses(body)


@pytest.mark.parametrize(
    ("item", "where"),
    [
        (
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            },
            "input[0].content[1]: content of type 'input_image'",
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}],
            },
            "input[0].output[0]: content of type 'input_image'",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
            "input[0].content[0]: content of type 'input_file'",
        ),
        (
            {"type": "web_search_call", "id": "ws_1"},
            "input[0]: items of type 'web_search_call' are not supported",
        ),
    ],
)
def test_images_files_and_hosted_items_are_refused(item: dict[str, Any], where: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_responses({"input": [item]})
    assert str(refused.value).startswith(where)


@pytest.mark.parametrize("kind", ["web_search", "file_search", "code_interpreter", "local_shell"])
def test_hosted_tools_are_refused_in_the_openai_envelope(kind: str) -> None:
    with pytest.raises(BadRequest) as refused:
        request(tools=[EXEC, {"type": kind}])
    assert f"tools[1]: hosted tool '{kind}' is not supported" in str(refused.value)
    envelope = OpenAIResponses().error(400, str(refused.value), "invalid_request_error")
    assert envelope == {
        "error": {
            "message": str(refused.value),
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


def test_a_turn_becomes_output_items_in_the_tools_own_shapes() -> None:
    req = request(tools=[EXEC, APPLY_PATCH, SUBAGENTS], store=False, max_output_tokens=100)
    assert [t["function"]["name"] for t in req.tools] == [
        "exec_command",
        "apply_patch",
        "wait_agent",
    ]
    t = turn(
        "Looking.",
        ("exec_command", {"cmd": "ls"}),
        ("apply_patch", {"input": PATCH}),
        ("wait_agent", {"targets": ["a"]}),
    )
    body = response_body(t, req)
    assert (body["id"], body["object"], body["status"], body["model"]) == (
        "resp_roll-3",
        "response",
        "completed",
        "policy",
    )
    assert (body["store"], body["max_output_tokens"], body["incomplete_details"]) == (
        False,
        100,
        None,
    )
    assert body["usage"] == {
        "input_tokens": 40,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 49,
    }
    message, command, patch, wait = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["text"] == "Looking."
    assert command["type"] == "function_call" and command["call_id"] == "call_3_0"
    assert command["arguments"] == '{"cmd": "ls"}' and "namespace" not in command
    assert patch["type"] == "custom_tool_call" and patch["input"] == PATCH
    assert patch["call_id"] == "call_3_1" and patch["name"] == "apply_patch"
    assert wait["type"] == "function_call" and wait["namespace"] == "multi_agent_v1"
    assert len({item["id"] for item in body["output"]}) == 4


def test_a_truncated_turn_is_an_incomplete_response() -> None:
    body = response_body(turn("half a sent", finish="length"), request())
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize(
    "t",
    [
        turn("Just text."),
        turn(""),
        turn(None, ("exec_command", {"cmd": "ls -la"})),
        turn("Thinking.", ("exec_command", {"cmd": "a"}), ("exec_command", {"cmd": "b"})),
        turn(None, ("apply_patch", {"input": PATCH})),
        # A freeform tool called with JSON arguments of another shape stays a function call.
        turn(None, ("apply_patch", {"patch": PATCH})),
        turn("Waiting.", ("wait_agent", {"targets": ["a"]})),
        turn("Ünïcode ✓", ("exec_command", {"cmd": "echo 'ü'"})),
    ],
    ids=["text", "empty", "call", "text+calls", "freeform", "freeform-misused", "ns", "unicode"],
)
def test_a_replayed_answer_parses_back_to_the_same_assistant_message(t: ChatReply) -> None:
    """What keeps a chain exact: the client replays the output items it got (with their ids
    and statuses), and the proxy reads the very message it answered."""
    req = request(tools=[EXEC, APPLY_PATCH, SUBAGENTS])
    replay = json.loads(json.dumps(response_body(t, req)["output"]))
    outputs = [
        {"type": f"{i['type']}_output", "call_id": i["call_id"], "output": "done"}
        for i in replay
        if i["type"] != "message"
    ]
    again = request(tools=[EXEC, APPLY_PATCH, SUBAGENTS], input=[user("hi"), *replay, *outputs])
    assert again.messages[1] == t.message
    assert [m["tool_call_id"] for m in again.messages[2:]] == [
        c["id"] for c in t.message.get("tool_calls", [])
    ]


def parse_frame(frame: bytes) -> tuple[str, dict[str, Any]]:
    text = frame.decode()
    assert text.endswith("\n\n") and text.count("\n") == 3
    event, data = text[:-2].split("\n")
    assert event.startswith("event: ") and data.startswith("data: ")
    payload = json.loads(data[6:])
    assert payload["type"] == event[7:]
    return event[7:], payload


def reassemble(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items as a client builds them from the deltas alone."""
    items: list[dict[str, Any]] = []
    for e in events:
        kind = e["type"]
        if kind == "response.output_item.added":
            assert e["output_index"] == len(items)
            items.append(json.loads(json.dumps(e["item"])))
        elif kind == "response.content_part.added":
            items[e["output_index"]]["content"].append(dict(e["part"]))
        elif kind == "response.output_text.delta":
            items[e["output_index"]]["content"][e["content_index"]]["text"] += e["delta"]
        elif kind == "response.function_call_arguments.delta":
            items[e["output_index"]]["arguments"] += e["delta"]
        elif kind == "response.custom_tool_call_input.delta":
            items[e["output_index"]]["input"] += e["delta"]
        elif kind == "response.output_item.done":
            items[e["output_index"]]["status"] = e["item"]["status"]
            assert items[e["output_index"]] == e["item"]
    return items


@pytest.mark.parametrize("finish", ["tool_calls", "length"])
async def test_the_stream_carries_exactly_the_plain_answer(finish: str) -> None:
    req = request(tools=[EXEC, APPLY_PATCH], stream=True)
    t = turn(
        "Line one.\nLine two.\n",
        ("exec_command", {"cmd": "ls"}),
        ("apply_patch", {"input": PATCH}),
        finish=finish,
    )
    body = response_body(t, req)
    frames = [f async for f in response_events(body)]
    kinds, events = zip(*(parse_frame(f) for f in frames), strict=True)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    closing = "response.completed" if finish == "tool_calls" else "response.incomplete"
    assert kinds[:2] == ("response.created", "response.in_progress") and kinds[-1] == closing
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    assert events[-1]["response"] == body
    assert kinds.count("response.output_text.delta") == 2  # the text arrives in pieces
    assert "response.function_call_arguments.done" in kinds
    assert "response.custom_tool_call_input.done" in kinds
    assert reassemble(list(events)) == body["output"]


def test_the_wire_api_serves_posts_to_responses_only() -> None:
    api = OpenAIResponses()
    assert api.matches("POST", "/v1/responses") and api.matches("POST", "/responses")
    assert not api.matches("GET", "/v1/responses")
    assert not api.matches("POST", "/v1/responses/resp_1/cancel")
    assert not api.matches("POST", "/v1/chat/completions")
    assert api.credential({"authorization": "Bearer k1"}) == "k1"
    assert api.credential({"api-key": "k2"}) == "k2"
    body = json.dumps({"input": "hi", "stream": True}).encode()
    req = api.parse(Request("POST", "/v1/responses", {}, body))
    answer = api.answer(turn("hello"), req)
    assert answer.status == 200 and answer.events is not None and answer.body is None
    plain = api.answer(turn("hello"), request())
    assert plain.events is None and plain.body["output"][0]["content"][0]["text"] == "hello"


async def test_the_policys_text_cannot_forge_stream_events() -> None:
    """A reply that spells out SSE frames stays text inside one delta's JSON: the client sees
    the same events and the same final response as for any other text."""
    forged = (
        'ok\n\nevent: response.completed\ndata: {"type": "response.completed"}\n\n'
        "data: [DONE]\n\r\n"
    )
    body = response_body(turn(forged, ("exec_command", {"cmd": "echo '\n\nevent: x'"})), request())
    frames = [f async for f in response_events(body)]
    kinds = [parse_frame(f)[0] for f in frames]
    assert kinds.count("response.completed") == 1 and kinds[-1] == "response.completed"
    events = [parse_frame(f)[1] for f in frames]
    assert reassemble(events) == body["output"]
    assert body["output"][0]["content"][0]["text"] == forged
