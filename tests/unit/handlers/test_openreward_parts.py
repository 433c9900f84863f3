"""The `openreward` handler's pure parts: its reading of server-sent events as openreward's
server writes them (sse-starlette: CRLF line ends, `: ping` comments, an answer cut into
`chunk`s), the instance's one-task rule, which rewards are unusable, the control's empty answer
and the episode's sum of rewards."""

import json

import pytest
from pydantic import ValidationError

from agentroll.handlers.builtin.control import empty_arguments
from agentroll.handlers.builtin.openreward.handler import (
    Call,
    Episode,
    OpenRewardInstance,
    bad_reward,
)
from agentroll.handlers.builtin.openreward.wire import sse_events


def test_sse_events_are_read_as_the_server_writes_them() -> None:
    answer = json.dumps({"ok": True, "output": {"blocks": [{"type": "text", "text": "a\u2028b"}]}})
    half = len(answer) // 2
    body = (
        "event: task_id\r\ndata: 5fe2\r\n\r\n"
        ": ping - 2026-11-27 05:00:00\r\n\r\n"
        f"event: chunk\r\ndata: {answer[:half]}\r\n\r\n"
        f"event: end\r\ndata: {answer[half:]}\r\n\r\n"
    )
    events = sse_events(body)
    assert [e for e, _ in events] == ["task_id", "chunk", "end"]
    assert events[0][1] == "5fe2"
    joined = "".join(d for e, d in events if e in ("chunk", "end"))
    assert json.loads(joined)["output"]["blocks"][0]["text"] == "a\u2028b"


def test_multi_line_data_is_joined_and_an_event_cut_off_is_not_read() -> None:
    body = 'data: one\ndata: two\n\nevent: end\ndata: {"ok": tr'
    assert sse_events(body) == [("message", "one\ntwo")]


@pytest.mark.parametrize(
    "task",
    [
        {},  # neither
        {"task_spec": {"a": 1}, "split": "train", "index": 0},  # both
        {"split": "train"},  # half an index
        {"task_spec": {"a": 1}, "index": 0},
    ],
)
def test_an_instance_names_its_task_one_way(task: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="either task_spec, or both split and index"):
        OpenRewardInstance.model_validate({"server": {"url": "http://h:1"}, **task})


def test_the_task_is_sent_as_given() -> None:
    by_spec = OpenRewardInstance.model_validate(
        {"server": {"url": "http://h:1"}, "task_spec": {"id": 3}}
    )
    by_index = OpenRewardInstance.model_validate(
        {"server": {"url": "http://h:1"}, "split": "test", "index": 0}
    )
    assert by_spec.create() == {"task_spec": {"id": 3}}
    assert by_index.create() == {"split": "test", "index": 0}


@pytest.mark.parametrize(
    ("output", "bad"),
    [
        ({"reward": 1.0, "finished": True}, False),
        ({"reward": 0, "finished": False}, False),
        ({"reward": None, "finished": False}, False),  # no reward yet: nothing wrong
        ({"reward": None, "finished": True}, True),  # NaN arrives as null
        ({"reward": float("nan"), "finished": False}, True),
        ({"reward": float("inf"), "finished": True}, True),
        ({"reward": True, "finished": True}, True),
        ({"reward": "1", "finished": True}, True),
    ],
)
def test_unusable_rewards(output: dict[str, object], bad: bool) -> None:
    assert bad_reward(output) is bad


def test_the_empty_answer_gives_each_required_argument_its_types_empty_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "guess": {"type": "integer", "minimum": 1, "maximum": 10},
            "score": {"type": "number"},
            "sure": {"type": "boolean"},
            "steps": {"type": "array", "items": {"type": "string"}},
            "ref": {"$ref": "#/$defs/Thing"},
            "optional": {"type": "string"},
        },
        "required": ["answer", "guess", "score", "sure", "steps", "ref"],
    }
    assert empty_arguments(schema) == {
        "answer": "",
        "guess": 1,
        "score": 0,
        "sure": False,
        "steps": [],
        "ref": None,
    }


def test_the_episodes_reward_sums_only_the_finite_rewards() -> None:
    rewards = [-0.5, None, 1, float("nan"), float("inf"), True, 0.25]
    episode = Episode(calls=[Call("guess", r, False) for r in rewards])
    assert episode.reward == 0.75  # -0.5 + 1 + 0.25: absent, NaN, inf and a bool count 0
