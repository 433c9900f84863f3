"""A trajectory's `messages` and `tools` are typed (`ChatMessage`, `ToolSpec`) for mypy, and
kept for the trainer exactly as the rollout produced them: every key, in its order, with
the values the policy wrote (a lone surrogate as its escape's characters)."""

import json
from typing import Any

import pytest
from pydantic import ValidationError

from agentroll.server.schema import AgentTrace, Trajectory
from agentroll.server.store import strict_json

# What real wire messages carry beside the keys `ChatMessage` lists: a reasoning parser's
# field, provider extras (a refusal, annotations, cache hints), a legacy role, nested extras
# in a tool call, keys in an order no type would choose, and text no UTF-8 encodes.
MESSAGES: list[dict[str, Any]] = [
    {"content": "Be brief.", "role": "system", "cache_control": {"type": "ephemeral"}},
    {"role": "user", "content": [{"type": "text", "text": "go \ud800"}], "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "list first",
        "refusal": None,
        "annotations": [],
        "tool_calls": [
            {
                "type": "function",
                "id": "c1",
                "index": 0,
                "function": {"arguments": '{"cmd": "\\ud800"}', "name": "sh"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "sh", "content": "a.txt\n"},
    {"role": "function", "name": "sh", "content": "legacy"},
    {"role": "ipython", "content": "out", "provider_specific_fields": {"k": [1, 2]}},
]
TOOLS: list[dict[str, Any]] = [
    {"function": {"name": "sh", "parameters": {"type": "object"}, "x-ext": 1}, "type": "function"},
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
]


def _trajectory(**fields: Any) -> Trajectory:
    base = {"job_id": "j", "handler": "h", "outcome": "ok", "status": "completed", "reward": 1}
    return Trajectory.model_validate({**base, **fields})


def test_messages_and_tools_are_stored_byte_for_byte_as_given() -> None:
    stored = strict_json(_trajectory(messages=MESSAGES, tools=TOOLS).model_dump(mode="json"))
    assert f'"messages":{strict_json(MESSAGES)},' in stored
    assert f'"tools":{strict_json(TOOLS)},' in stored
    # A lone surrogate is stored as its escape's six characters: valid UTF-8 for any parser.
    assert '"go \\\\ud800"' in stored
    stored.encode()


def test_a_stored_trajectory_reads_back_with_every_key_in_its_order() -> None:
    stored = strict_json(_trajectory(messages=MESSAGES, tools=TOOLS).model_dump(mode="json"))
    read = Trajectory.model_validate_json(stored)
    assert read.messages == json.loads(strict_json(MESSAGES)) and read.tools == TOOLS
    assert [list(m) for m in read.messages] == [list(m) for m in MESSAGES]
    assert read.messages[2].get("reasoning_content") == "list first"
    assert strict_json(read.model_dump(mode="json")) == stored


def test_an_agent_trace_keeps_its_messages_as_given() -> None:
    trace = AgentTrace(name="a", policy="default", trainable=True, messages=MESSAGES, tools=TOOLS)
    dumped = json.loads(strict_json(trace.model_dump(mode="json")))
    assert dumped["messages"] == json.loads(strict_json(MESSAGES))
    assert dumped["tools"] == TOOLS


def test_the_trajectory_holds_its_own_copy_of_each_message() -> None:
    given = [{"role": "user", "content": "hi"}]
    trajectory = _trajectory(messages=given)
    given[0]["content"] = "changed after the record was made"
    assert trajectory.messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [("messages", ["hi"]), ("messages", {"role": "user"}), ("tools", [None]), ("tools", [[1]])],
)
def test_a_message_or_tool_that_is_not_an_object_is_refused(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        _trajectory(**{field: value})
