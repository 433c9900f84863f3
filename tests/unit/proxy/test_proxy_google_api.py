"""The Google generateContent shapes the proxy reads and writes (Gemini CLI's requests)."""

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from agentroll.server.proxy import google_api as google
from agentroll.server.proxy.http11 import BadRequest, Request
from agentroll.server.proxy.wire import ChatReply, ChatRequest

FIXTURES = Path(__file__).parents[2] / "fixtures" / "google" / "gemini_cli_0.61.0.json"
API = google.GoogleGenerate()
STREAM = "/v1beta/models/policy:streamGenerateContent"
TOOL_CALL = {
    "id": "call_3_0",
    "type": "function",
    "function": {"name": "run_shell_command", "arguments": '{"command": "ls -la\\n"}'},
}


def captured(name: str) -> dict[str, Any]:
    return dict(json.loads(FIXTURES.read_text())[name])


def request(
    body: Any, path: str = "/v1beta/models/policy:generateContent", query: str = ""
) -> Request:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Request("POST", path, {"x-goog-api-key": "k"}, raw, query)


def parse(body: Any, **where: str) -> ChatRequest:
    return API.parse(request(body, **where))


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": t} for t in texts]}


def turn(message: dict[str, Any], finish: str = "stop") -> ChatReply:
    return ChatReply(
        "rollout-3", "policy", message, finish, prompt_tokens=120, completion_tokens=17
    )


def test_gemini_cli_turn_maps_onto_the_openai_chat_shape() -> None:
    sent = captured("main_turn_3")
    path, _, query = sent["path"].partition("?")
    req = API.parse(
        Request("POST", path, sent["headers"], json.dumps(sent["body"]).encode(), query)
    )
    assert (req.stream, req.model, req.parse_tools, req.max_tokens, req.stop) == (
        True, "policy", True, None, [],
    )  # fmt: skip
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    system, task, first, first_out, second, second_out = req.messages
    assert system["content"].startswith("You are Gemini CLI, an autonomous CLI agent")
    # The session context and the prompt are two parts of one turn: a content array.
    assert [p["text"] for p in task["content"]][1] == "Say hi and run echo"
    assert task["content"][0]["text"].startswith("<session_context>")
    assert first == {
        "role": "assistant",
        "content": "Let me look.\nSecond line.\n",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {
                    "name": "run_shell_command",
                    "arguments": '{"command": "echo hello-from-tool"}',
                },
            }
        ],
    }
    assert first_out["tool_call_id"] == "call_0_0" and first_out["name"] == "run_shell_command"
    assert first_out["content"].startswith("<untrusted_context>\nOutput: hello-from-tool")
    # The CLI named the call the stub sent without an id; its response names it the same.
    assert second["content"] is None
    assert (
        second["tool_calls"][0]["id"] == second_out["tool_call_id"] == "read_file_1795395306481_0"
    )
    assert second_out["content"] == "some notes\n"
    names = [t["function"]["name"] for t in req.tools]
    assert names == ["read_file", "replace", "run_shell_command"]
    read_file = req.tools[0]["function"]
    assert read_file["parameters"]["required"] == ["file_path"]
    assert read_file["description"].startswith("Reads and returns the content")


def test_the_routers_plain_call_has_no_tools_and_two_user_turns() -> None:
    sent = captured("router")
    req = API.parse(
        Request("POST", sent["path"], sent["headers"], json.dumps(sent["body"]).encode())
    )
    assert (req.stream, req.extra["array"], req.tools, req.parse_tools) == (False, False, [], False)
    assert req.model == "gemini-3.5-flash-lite"
    assert [m["role"] for m in req.messages] == ["system", "user", "user"]
    assert "Task Routing AI" in req.messages[0]["content"]


def test_calls_without_ids_get_ids_from_their_position_and_responses_find_theirs() -> None:
    body = {
        "contents": [
            user("go"),
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "read_file", "args": {"file_path": "a"}}},
                    {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}},
                ],
            },
            {
                "role": "user",
                "parts": [  # answered in the other order, by name only
                    {
                        "functionResponse": {
                            "name": "run_shell_command",
                            "response": {"output": "x"},
                        }
                    },
                    {"functionResponse": {"name": "read_file", "response": {"error": "gone"}}},
                    {"functionResponse": {"name": "glob", "response": {"output": "?"}}},
                    {"text": "and then?"},
                ],
            },
            {"role": "model", "parts": [{"functionCall": {"name": "glob", "args": {}}}]},
        ]
    }
    messages = parse(body).messages
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_0", "call_1"]
    outs = messages[2:5]
    assert [(m["tool_call_id"], m["name"]) for m in outs] == [
        ("call_1", "run_shell_command"), ("call_0", "read_file"), ("response_2", "glob"),
    ]  # fmt: skip
    # Only a bare `output` is the tool's text; anything else stays JSON.
    assert [m["content"] for m in outs[:2]] == ["x", '{"error": "gone"}']
    assert messages[5] == {"role": "user", "content": "and then?"}
    assert messages[6]["tool_calls"][0]["id"] == "call_2"
    assert messages[6]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert parse(copy.deepcopy(body)).messages == messages  # the same history, the same ids


def test_fields_may_be_spelled_in_snake_case() -> None:
    camel = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            user("hi"),
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ],
        "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {}}]}],
        "generationConfig": {"maxOutputTokens": 7, "stopSequences": ["END"]},
    }
    snake = {
        "system_instruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            user("hi"),
            {"role": "model", "parts": [{"function_call": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"function_response": {"name": "f", "response": {}}}]},
        ],
        "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {}}]}],
        "generation_config": {"max_output_tokens": 7, "stop_sequences": ["END"]},
    }
    a, b = parse(camel), parse(snake)
    assert a == b
    assert (a.max_tokens, a.stop) == (7, ["END"])
    assert a.tools == [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def test_unknown_fields_are_ignored() -> None:
    plain = {"contents": [user("hi")], "tools": [{"functionDeclarations": [{"name": "f"}]}]}
    extended = {
        "contents": [
            {
                "role": "user",
                "parts": [{"text": "hi", "thoughtSignature": "x", "mediaResolution": 1}],
            }
        ],
        "tools": [{"functionDeclarations": [{"name": "f", "behavior": "NON_BLOCKING"}]}],
        "generationConfig": {"temperature": 0.1, "thinkingConfig": {"includeThoughts": True}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "labels": {"team": "x"},
        "aBrandNewField": [1, 2, 3],
    }
    assert parse(extended) == parse(plain)


def test_thoughts_are_not_input_and_function_calling_can_be_switched_off() -> None:
    body = {
        "contents": [
            user("hi"),
            {"role": "model", "parts": [{"text": "hmm", "thought": True}, {"text": "Hello."}]},
            user("bye"),
        ],
        "tools": [{"functionDeclarations": [{"name": "f"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
    }
    req = parse(body)
    assert req.messages[1] == {"role": "assistant", "content": "Hello."}
    assert req.tools and not req.parse_tools


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "must be an object"),
        ({}, "contents is not specified"),
        ({"contents": [{"role": "user", "parts": []}]}, "must not be empty"),
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "'user' or 'model'"),
        ({"contents": [{"parts": [{"text": 5}]}]}, "text must be a string"),
        ({"contents": [{"parts": [{"unheardOf": {}}]}]}, "a part needs text"),
        (
            {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]},
            "belongs in a model turn",
        ),
        (
            {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
            "needs a name",
        ),
        ({"contents": [user("x")], "generationConfig": {"candidateCount": 2}}, "candidateCount"),
        ({"contents": [user("x")], "generationConfig": {"maxOutputTokens": 0}}, "maxOutputTokens"),
        ({"contents": [user("x")], "generationConfig": {"stopSequences": [1]}}, "stopSequences"),
        ({"contents": [user("x")], "tools": [{"functionDeclarations": [{}]}]}, "needs a name"),
    ],
)
def test_malformed_requests_say_why(body: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        parse(body)
    assert caught.value.status == 400
    envelope = API.error(400, str(caught.value), "invalid_request_error")
    assert envelope == {
        "error": {"code": 400, "message": str(caught.value), "status": "INVALID_ARGUMENT"}
    }


@pytest.mark.parametrize("raw", [b"{contents", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_that_is_not_json_is_a_bad_request(raw: bytes) -> None:
    """Nested deeper than the decoder goes is no JSON either (and no server error)."""
    with pytest.raises(BadRequest, match="not JSON"):
        parse(raw)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"contents": [{"parts": [{"text": "what is this?"}, {"inlineData": {
                "mimeType": "image/png", "data": "iVBORw0KGgo="}}]}]},
            "images, audio, video and files are not supported",
        ),
        (
            {"contents": [{"parts": [{"file_data": {"file_uri": "gs://b/cat.jpg"}}]}]},
            "images, audio, video and files are not supported",
        ),
        (
            {"contents": [{"parts": [{"functionResponse": {
                "name": "f", "response": {}, "parts": [{"inlineData": {}}]}}]}]},
            "images, audio, video and files are not supported",
        ),
        ({"contents": [user("x")], "tools": [{"googleSearch": {}}]}, "server-side tools"),
        ({"contents": [user("x")], "tools": [{"codeExecution": {}}]}, "server-side tools"),
        (
            {"contents": [{"role": "model", "parts": [{"executableCode": {"code": "1"}}]}]},
            "code execution",
        ),
        ({"contents": [user("x")], "cachedContent": "cachedContents/abc"}, "cached contents"),
        (
            {"contents": [user("x")], "generationConfig": {"responseModalities": ["IMAGE"]}},
            "only TEXT output",
        ),
    ],
)  # fmt: skip
def test_unsupported_features_get_invalid_argument(body: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        parse(body)
    assert API.error(caught.value.status, str(caught.value), "x")["error"]["status"] == (
        "INVALID_ARGUMENT"
    )


def test_count_tokens_is_not_served() -> None:
    with pytest.raises(BadRequest, match="countTokens") as caught:
        parse({"contents": [user("x")]}, path="/v1beta/models/policy:countTokens")
    assert API.error(caught.value.status, "no", "x")["error"]["status"] == "UNIMPLEMENTED"


@pytest.mark.parametrize(
    ("method", "path", "served"),
    [
        ("POST", "/v1beta/models/policy:generateContent", True),
        ("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", True),
        ("POST", "/v1/models/policy:generateContent", True),
        ("POST", "/v1alpha/tunedModels/mine:generateContent", True),
        ("POST", "/v1beta/models/policy:countTokens", True),
        ("GET", "/v1beta/models/policy:generateContent", False),
        ("POST", "/v1beta/models/policy:embedContent", False),
        ("POST", "/v1beta/models/policy/x:generateContent", False),
        ("POST", "/v1/chat/completions", False),
    ],
)
def test_routes(method: str, path: str, served: bool) -> None:
    assert API.matches(method, path) is served


def test_the_key_comes_in_x_goog_api_key_or_as_a_bearer_token() -> None:
    assert API.credential({"x-goog-api-key": "k1"}) == "k1"
    assert API.credential({"authorization": "Bearer k2"}) == "k2"
    assert API.credential({"authorization": "Basic k3"}) == ""


@pytest.mark.parametrize(
    ("status", "name"),
    [(401, "UNAUTHENTICATED"), (403, "PERMISSION_DENIED"), (404, "NOT_FOUND"),
     (429, "RESOURCE_EXHAUSTED"), (500, "INTERNAL"), (503, "UNAVAILABLE")],
)  # fmt: skip
def test_errors_come_in_googles_envelope(status: int, name: str) -> None:
    body = API.error(status, "why", "ignored", "ignored too")
    assert body == {"error": {"code": status, "message": "why", "status": name}}


def test_a_turn_with_a_call_is_one_candidate_with_text_and_function_call_parts() -> None:
    message = {"role": "assistant", "content": "Listing.", "tool_calls": [TOOL_CALL]}
    req = parse({"contents": [user("x")]})
    body = API.answer(turn(message, "tool_calls"), req).body
    assert body == {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Listing."},
                        {
                            "functionCall": {
                                "id": "call_3_0",
                                "name": "run_shell_command",
                                "args": {"command": "ls -la\n"},
                            }
                        },
                    ],
                },
                "index": 0,
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 120,
            "candidatesTokenCount": 17,
            "totalTokenCount": 137,
        },
        "modelVersion": "policy",
        "responseId": "rollout-3",
    }


def test_finish_reasons_and_an_empty_reply() -> None:
    req = parse({"contents": [user("x")]})
    cut = API.answer(turn({"role": "assistant", "content": "half"}, "length"), req).body
    assert cut["candidates"][0]["finishReason"] == "MAX_TOKENS"
    empty = API.answer(turn({"role": "assistant", "content": ""}), req).body
    assert empty["candidates"][0]["content"]["parts"] == [{"text": ""}]
    assert empty["candidates"][0]["finishReason"] == "STOP"


def reassemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client makes of a stream: text parts joined, other parts kept, the last
    chunk's finish reason and counts."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    last = chunks[-1]
    candidate = {**last["candidates"][0], "content": {"role": "model", "parts": parts}}
    return {**last, "candidates": [candidate]}


@pytest.mark.parametrize(
    ("message", "chunks_sent"),
    [
        ({"role": "assistant", "content": "one\ntwo\nthree", "tool_calls": [TOOL_CALL]}, 4),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [TOOL_CALL, {**TOOL_CALL, "id": "b"}],
            },
            2,
        ),
        ({"role": "assistant", "content": "only text\n"}, 1),
        ({"role": "assistant", "content": ""}, 1),
    ],
)
async def test_a_stream_reassembles_to_the_plain_answer(
    message: dict[str, Any], chunks_sent: int
) -> None:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    plain = API.answer(turn(message, finish), parse({"contents": [user("x")]})).body
    streamed = API.answer(
        turn(message, finish),
        parse(
            {"contents": [user("x")]},
            path="/v1beta/models/p:streamGenerateContent",
            query="alt=sse",
        ),
    )
    assert streamed.events is not None
    frames = [f async for f in streamed.events]
    assert all(f.startswith(b"data: ") and f.endswith(b"\r\n\r\n") for f in frames)
    chunks = [json.loads(f[6:]) for f in frames]
    assert len(chunks) == chunks_sent
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert reassemble(chunks) == plain
    # Without `alt=sse` the same chunks come as one JSON array.
    array = API.answer(
        turn(message, finish),
        parse({"contents": [user("x")]}, path="/v1beta/models/p:streamGenerateContent"),
    )
    assert array.events is None and array.body == chunks


def test_an_answer_sent_back_as_history_is_the_same_assistant_message() -> None:
    """What keeps the chain: the reply, echoed by the client, parses back to the message the
    proxy recorded (text, call ids and arguments)."""
    message = {"role": "assistant", "content": "Listing.", "tool_calls": [TOOL_CALL]}
    answer = API.answer(turn(message, "tool_calls"), parse({"contents": [user("x")]})).body
    echoed = answer["candidates"][0]["content"]
    result = {"functionResponse": {"id": "call_3_0", "name": "run_shell_command",
                                   "response": {"output": "a b"}}}  # fmt: skip
    history = {"contents": [user("x"), echoed, {"role": "user", "parts": [result]}]}
    messages = parse(history).messages
    assert messages[1] == message
    assert messages[2] == {
        "role": "tool", "content": "a b", "tool_call_id": "call_3_0", "name": "run_shell_command",
    }  # fmt: skip


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": [value]}
    return value


ODD_VALUES = [None, 0, -1, 2**70, 1.5, True, "", "x", [], [1], {}, {"a": 1}, [[]], _deep(300)]


def _mangled(body: Any, rng: random.Random) -> Any:
    """`body` with one value somewhere replaced by an odd one."""
    if not isinstance(body, (dict, list)) or not body or rng.random() < 0.25:
        return rng.choice(ODD_VALUES)
    copy_ = dict(body) if isinstance(body, dict) else list(body)
    key = rng.choice(list(copy_)) if isinstance(copy_, dict) else rng.randrange(len(copy_))
    copy_[key] = _mangled(copy_[key], rng)  # type: ignore[index]
    return copy_


def test_a_mangled_request_is_a_400_never_a_crash() -> None:
    """The harness's requests are the policy's to shape (it can call the proxy itself): any
    of them is either parsed or refused as a bad request."""
    rng = random.Random(7)
    sent = captured("main_turn_3")["body"]
    parsed = refused = 0
    for _ in range(3000):
        try:
            parse(_mangled(sent, rng), path=STREAM, query="alt=sse")
            parsed += 1
        except BadRequest as exc:
            assert exc.status == 400
            refused += 1
    assert parsed > 100 and refused > 100  # both kinds were exercised
