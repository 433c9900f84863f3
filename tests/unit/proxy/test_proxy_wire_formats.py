"""What every wire format the proxy serves must do with any turn the policy samples."""

import json

import pytest

from agentroll.server.proxy.apis import APIS
from agentroll.server.proxy.wire import ChatReply, ChatRequest, WireAPI

# Valid JSON, but not UTF-8: tool-call arguments the policy escaped as half a surrogate pair.
LONE_SURROGATE = json.dumps({"command": "\ud800"})


def turn() -> ChatReply:
    call = {"id": "call_0_0", "type": "function",
            "function": {"name": "shell", "arguments": LONE_SURROGATE}}  # fmt: skip
    message = {"role": "assistant", "content": "running \ud800", "tool_calls": [call]}
    return ChatReply("r-0", "policy", message, "tool_calls", 12, 7)


def request(stream: bool) -> ChatRequest:
    tool = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
    return ChatRequest(
        messages=[{"role": "user", "content": "go"}], tools=[tool], parse_tools=True,
        stream=stream, include_usage=True, max_tokens=None, stop=[],
    )  # fmt: skip


@pytest.mark.parametrize("wire", APIS, ids=lambda w: w.name)
async def test_a_turn_that_is_not_utf8_encodable_is_still_streamed(wire: WireAPI) -> None:
    response = wire.answer(turn(), request(stream=True))
    assert response.status == 200 and response.events is not None
    data = b"".join([event async for event in response.events])
    assert b"\\ud800" in data  # escaped, so the client gets the character the policy sent
    data.decode("utf-8")  # and every byte on the wire is UTF-8
