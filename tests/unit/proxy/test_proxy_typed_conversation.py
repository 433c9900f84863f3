"""Every wire format's translator hands the proxy a conversation of the shared types
(`ChatMessage`, `ChatToolCall`, `ToolSpec`): what mypy checks in the translators' code is
checked here on what they build from real requests of each format, one conversation with a
system prompt, a tool call and its result."""

from collections.abc import Mapping
from typing import Any, get_args, get_type_hints

import pytest

from agentroll.server.proxy.anthropic_api import parse_messages
from agentroll.server.proxy.google_api import parse_generate
from agentroll.server.proxy.openai_api import parse_chat
from agentroll.server.proxy.responses_api import parse_responses
from agentroll.server.proxy.wire import ChatRequest
from agentroll.server.schema.messages import (
    ChatMessage,
    ChatToolCall,
    FunctionCall,
    FunctionSpec,
    Role,
    ToolSpec,
)

SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}


def _keys_of(value: Mapping[str, Any], typed: Any, where: str) -> None:
    """`value` has every key `typed` requires and no key it does not list."""
    assert typed.__required_keys__ <= value.keys(), f"{where}: missing keys"
    listed = typed.__required_keys__ | typed.__optional_keys__
    assert value.keys() <= listed, f"{where}: {sorted(value.keys() - listed)} not in {typed}"


def check_conversation(request: ChatRequest) -> None:
    for i, message in enumerate(request.messages):
        _keys_of(message, ChatMessage, f"messages[{i}]")
        assert message["role"] in get_args(Role)
        content = message["content"]
        assert content is None or isinstance(content, str | list)
        for call in message.get("tool_calls", []):
            _keys_of(call, ChatToolCall, f"messages[{i}].tool_calls")
            _keys_of(call["function"], FunctionCall, f"messages[{i}].tool_calls.function")
            assert all(isinstance(v, str) for v in call["function"].values())
    for i, tool in enumerate(request.tools):
        _keys_of(tool, ToolSpec, f"tools[{i}]")
        _keys_of(tool["function"], FunctionSpec, f"tools[{i}].function")
        hints = get_type_hints(FunctionSpec)
        assert isinstance(tool["function"]["name"], hints["name"])


OPENAI_CHAT = {
    "model": "policy",
    "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "list", "cache_control": {}}]},
        {
            "role": "assistant",
            "content": None,
            "function_call": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": {}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "sh", "content": "a.txt"},
    ],
    "tools": [{"type": "function", "function": {"name": "sh", "parameters": SCHEMA}}],
}
ANTHROPIC = {
    "model": "policy",
    "max_tokens": 64,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "c1", "name": "sh", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"},
                {"type": "text", "text": "go on"},
            ],
        },
    ],
    "tools": [{"name": "sh", "description": "a shell", "input_schema": SCHEMA}],
}
GOOGLE = {
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "contents": [
        {"role": "user", "parts": [{"text": "list"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"cmd": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {}}}]},
    ],
    "tools": [{"functionDeclarations": [{"name": "sh", "parametersJsonSchema": SCHEMA}]}],
}
RESPONSES = {
    "model": "policy",
    "instructions": "Be brief.",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list"}]},
        {"type": "reasoning", "encrypted_content": "..."},
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"cmd": "ls"}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** x"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
    ],
    "tools": [
        {"type": "function", "name": "sh", "parameters": SCHEMA},
        {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
    ],
}

PARSED = {
    "openai_chat": lambda: parse_chat(OPENAI_CHAT),
    "anthropic": lambda: parse_messages(ANTHROPIC),
    "google": lambda: parse_generate(GOOGLE, "policy", stream=False, array=False),
    "openai_responses": lambda: parse_responses(RESPONSES),
}


@pytest.mark.parametrize("wire", PARSED)
def test_each_wire_format_becomes_the_typed_conversation(wire: str) -> None:
    request = PARSED[wire]()
    check_conversation(request)
    roles = [m["role"] for m in request.messages]
    assert roles[0] == "system" and "assistant" in roles and "tool" in roles
    replied = next(m for m in request.messages if m["role"] == "tool")
    first_call = request.messages[roles.index("assistant")]["tool_calls"][0]
    assert replied["tool_call_id"] == first_call["id"]
    assert request.tools[0]["function"]["name"] == "sh"
    assert request.tools[0]["function"]["parameters"]["required"] == ["cmd"]


def test_the_check_refuses_a_key_the_types_do_not_list() -> None:
    """The control: a conversation off the types fails the check above."""
    request = parse_chat(OPENAI_CHAT)
    request.messages[0]["contnet"] = "typo"  # type: ignore[typeddict-unknown-key]
    with pytest.raises(AssertionError, match="contnet"):
        check_conversation(request)
