"""OpenAI-style messages and error observations from parsed replies."""

import json

from agentroll.handlers.toolcalls import (
    HermesParser,
    ParsedReply,
    ToolCall,
    assistant_message,
    error_observation,
    openai_tool_call,
    tool_message,
)


def test_assistant_message_carries_openai_tool_calls() -> None:
    reply = HermesParser().parse(
        'Checking.\n<tool_call>\n{"name": "ls", "arguments": {"path": "/tmp", "n": [1]}}\n'
        "</tool_call>"
    )
    message = assistant_message(reply)
    assert message == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"path": "/tmp", "n": [1]}'},
            }
        ],
    }
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
        "path": "/tmp",
        "n": [1],
    }


def test_plain_reply_has_no_tool_calls_key() -> None:
    assert assistant_message(ParsedReply("42")) == {"role": "assistant", "content": "42"}


def test_arguments_json_keeps_unicode_readable() -> None:
    call = ToolCall("echo", {"text": "héllo 🚀"}, "call_3")
    assert openai_tool_call(call)["function"]["arguments"] == '{"text": "héllo 🚀"}'


def test_tool_message_links_back_to_the_call() -> None:
    call = ToolCall("ls", {}, "call_1")
    assert tool_message(call, "a.txt") == {
        "role": "tool",
        "content": "a.txt",
        "tool_call_id": "call_1",
        "name": "ls",
    }


def test_error_observation_lists_errors_and_the_format() -> None:
    parser = HermesParser()
    reply = parser.parse('<tool_call>{"name": "ls" "arguments": {}}</tool_call>')
    text = error_observation(reply, parser.format_hint)
    lines = text.splitlines()
    assert lines[0] == "Some tool calls in your last message were malformed and were not run:"
    assert lines[1].startswith("- tool call 1 is not valid JSON: Expecting ',' delimiter at char")
    assert "<tool_call>" in lines[2]
    assert error_observation(["a", "b"]) == (
        "Some tool calls in your last message were malformed and were not run:\n- a\n- b"
    )
    assert error_observation(ParsedReply("fine")) == ""


def test_error_observation_is_bounded() -> None:
    text = error_observation([f"tool call {i} is empty" for i in range(1, 3001)], max_items=3)
    assert text.splitlines()[1:] == [
        "- tool call 1 is empty",
        "- tool call 2 is empty",
        "- tool call 3 is empty",
        "- ... and 2997 more",
    ]


def test_with_call_ids_renames_in_order() -> None:
    reply = ParsedReply("", (ToolCall("a", {}, "call_0"), ToolCall("b", {}, "call_1")))
    renamed = reply.with_call_ids("t3_")
    assert [c.id for c in renamed.calls] == ["t3_0", "t3_1"]
    assert [c.id for c in reply.calls] == ["call_0", "call_1"]  # the original is unchanged
