"""The OpenAI request/response shapes the proxy reads and writes."""

import json

import pytest

from agentroll.server.proxy import openai_api as api
from agentroll.server.proxy.http11 import BadRequest


def test_messages_keep_only_what_a_chat_template_reads() -> None:
    raw = {
        "role": "assistant",
        "content": "hi",
        "function_call": None,
        "provider_specific_fields": {"x": 1},
        "extra": {"actions": []},
        "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": {"command": "ls"}}}],
    }
    assert api.sanitize_message(raw, 0) == {
        "role": "assistant",
        "content": "hi",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    tool = {"role": "tool", "content": "out", "tool_call_id": "c1", "name": "bash", "x": 2}
    assert api.sanitize_message(tool, 1) == {
        "role": "tool",
        "content": "out",
        "tool_call_id": "c1",
        "name": "bash",
    }
    assert api.sanitize_message({"role": "developer", "content": "be"}, 2)["role"] == "system"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": []}, "non-empty"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "needs a role"),
        ({"messages": [{"role": ["user"], "content": "x"}]}, "needs a role"),  # not text
        ({"messages": [{"role": {"user": 1}, "content": "x"}]}, "needs a role"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n must be 1"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "image_url is only"),
    ],
)
def test_unusable_chat_requests_say_why(body: dict, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        api.parse_chat(body)


def test_chat_request_fields() -> None:
    req = api.parse_chat(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "max_completion_tokens": 5,
            "stop": "END",
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert (req.max_tokens, req.stop, req.stream, req.include_usage) == (5, ["END"], True, True)
    assert req.parse_tools
    no_tools = api.parse_chat(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function"}],
            "tool_choice": "none",
        }
    )
    assert not no_tools.parse_tools


def test_completions_need_token_ids() -> None:
    assert api.parse_completion({"prompt": [[1, 2, 3]]}).prompt_ids == [1, 2, 3]
    with pytest.raises(BadRequest, match="token ids"):
        api.parse_completion({"prompt": "hello"})


async def test_a_reply_streams_as_chunks_then_done() -> None:
    message = {
        "role": "assistant",
        "content": "line one\nline two",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    body = api.chat_body("id1", "policy", message, "tool_calls", api.usage(10, 4))
    frames = [f async for f in api.chat_events(body, include_usage=True)]
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    assert frames[-1] == b"data: [DONE]\n\n"
    events = [json.loads(f[6:]) for f in frames[:-1]]
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == "line one\nline two"
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["f"]
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert events[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
