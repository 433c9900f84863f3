"""A verifiers worker's child and its one channel (`child_channel`), and how the worker takes
the child's reply (`reply_checks`): what a grader's code writes of its own never reaches the
server, a child never reports a load failure once the policy's work reached its code, and its
rewards carry the worker's own rubric's names and weights. The child here is a real fork of
the test process; the server's channel a pipe of the test's."""

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentroll.handlers.builtin.verifiers_env import child_channel
from agentroll.handlers.builtin.verifiers_env.reply_checks import (
    call_check,
    done,
    reply_check,
    rubric_rewards,
)

RUBRIC = {"correct": 1.0, "brief": 0.5}
HONEST = {
    "ok": True,
    "rewards": {"correct": {"score": 0.0, "weight": 1.0}, "brief": {"score": 1.0, "weight": 0.5}},
    "metrics": {"chars": 2.0},
}


@pytest.fixture
def server() -> Iterator[tuple[int, int]]:
    """A pipe standing in for the worker's channel to the server."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    os.close(read)
    os.close(write)


def unread(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


def legacy_scoring(reply: dict[str, Any]) -> dict[str, Any]:
    return rubric_rewards(reply, weights=RUBRIC, mapped=False)


def in_child(respond: Any, server: tuple[int, int], relay: Any = None) -> dict[str, Any]:
    check = reply_check(("score", "episode"), legacy_scoring, relay)
    return child_channel.in_child(respond, [server[1]], *check)


def test_an_honest_childs_reply_reaches_the_worker_as_it_scored(
    server: tuple[int, int],
) -> None:
    assert in_child(lambda: HONEST, server) == HONEST


def test_a_line_the_childs_code_writes_to_the_servers_channel_never_reaches_it(
    server: tuple[int, int],
) -> None:
    forged = json.dumps({"ok": True, "rewards": {"r": {"score": 1e300, "weight": 1}}})

    def respond() -> dict[str, Any]:
        os.write(server[1], forged.encode() + b"\n")  # the child's copy is /dev/null
        return HONEST

    assert in_child(respond, server) == HONEST
    assert unread(server[0]) == b""


def test_a_line_the_childs_code_writes_beside_its_reply_fails_it_as_the_replys_doing(
    server: tuple[int, int],
) -> None:
    def respond() -> dict[str, Any]:
        child_channel.tell_worker({"final": HONEST})  # its own reply, then the genuine one
        return HONEST

    reply = in_child(respond, server)
    assert (reply["ok"], reply["stage"]) == (False, "score")
    assert "ChannelError" in reply["error"]


def test_a_childs_turns_go_to_the_relay_and_its_answer_comes_back(
    server: tuple[int, int],
) -> None:
    relayed: list[dict[str, Any]] = []

    def relay(message: dict[str, Any]) -> dict[str, Any]:
        relayed.append(message)
        return {"reply": "7"}

    def respond() -> dict[str, Any]:
        answer = child_channel.ask_worker({"turn": [{"role": "user", "content": "guess"}]})
        return {**HONEST, "metrics": {"answer": float(answer["reply"])}}

    reply = in_child(respond, server, relay)
    assert relayed == [{"turn": [{"role": "user", "content": "guess"}]}]
    assert reply["metrics"] == {"answer": 7.0}


def test_a_turn_where_the_request_has_none_breaks_the_channel(server: tuple[int, int]) -> None:
    def respond() -> dict[str, Any]:
        child_channel.ask_worker({"turn": []})  # answered `{}`: the worker stopped answering
        return HONEST

    assert in_child(respond, server)["stage"] == "score"


@pytest.mark.parametrize(
    ("forged", "stage"),
    [
        ({"ok": False, "stage": "load", "error": "ImportError: forged"}, "score"),
        ({"ok": False, "stage": "episode", "error": "ValueError: on the reply"}, "episode"),
        ({"ok": False, "error": "no stage"}, "score"),
    ],
)
def test_the_worker_not_the_child_decides_a_failures_stage(
    forged: dict[str, Any], stage: str
) -> None:
    final, _, _ = reply_check(("score", "episode"), legacy_scoring)
    assert final(forged, False) == {"ok": False, "stage": stage, "error": forged["error"]}


@pytest.mark.parametrize(
    ("rewards", "why"),
    [
        ({"r": {"score": 1e300, "weight": 1}}, "'r' at weight 1"),
        (
            {"correct": {"score": 1.0, "weight": 1e300}, "brief": {"score": 1, "weight": 0.5}},
            "1e+300",
        ),
        ({"correct": {"score": 1.0, "weight": 1.0}}, "not the rubric's"),
        ({**HONEST["rewards"], "brief": {"score": "1", "weight": 0.5}}, "not a number"),
    ],
)
def test_rewards_not_under_the_rubrics_own_names_and_weights_fail_the_scoring(
    rewards: dict[str, Any], why: str
) -> None:
    final, _, _ = reply_check(("score",), legacy_scoring)
    reply = final({"ok": True, "rewards": rewards, "metrics": {}}, False)
    assert (reply["ok"], reply["stage"]) == (False, "score")
    assert why in reply["error"]


def test_a_v1_reward_function_may_name_its_rewards_at_its_own_weight() -> None:
    mapped = {"ok": True, "rewards": {"part_a": {"score": 1.0, "weight": 0.5}}, "metrics": {}}
    assert rubric_rewards(mapped, weights=RUBRIC, mapped=True) == mapped
    with pytest.raises(ValueError, match="part_a"):
        rubric_rewards(
            {"ok": True, "rewards": {"part_a": {"score": 1.0, "weight": 2.0}}, "metrics": {}},
            weights=RUBRIC,
            mapped=True,
        )


def test_an_episodes_reply_says_only_that_it_completed() -> None:
    final, _, _ = reply_check(("episode",), done)
    assert final({"ok": True, "rewards": {"r": {"score": 1e300, "weight": 1}}}, False) == {
        "ok": True
    }


def test_a_tool_call_reports_load_only_before_its_toolsets_were_set_up() -> None:
    final, broken, relay = call_check()
    load = {"ok": False, "stage": "load", "error": "ImportError: no toolset"}
    assert final(load, False) == load
    assert final(load, True) == {"ok": True, "text": load["error"], "is_error": True}
    assert broken("a forged line")["is_error"] is True
    assert relay is None
