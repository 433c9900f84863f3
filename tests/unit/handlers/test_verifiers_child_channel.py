"""A verifiers worker's child and its one channel (`child_channel`), and how the worker takes
the child's reply (`reply_checks`, a legacy rollout's `Transcript`): what a grader's code
writes of its own never reaches the server, a child never reports a load failure once the
policy's work reached its code, its rewards carry the worker's own rubric's names and
weights, and an environment that rewrites the conversation is the worker's verdict. The child
here is a real fork of the test process; the server's channel a pipe of the test's."""

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentroll.handlers.builtin.verifiers_env import child_channel
from agentroll.handlers.builtin.verifiers_env.legacy_worker import Transcript, rewritten_check
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
    return rubric_rewards(reply, weights=RUBRIC, mapped=frozenset())


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
    assert final(forged, frozenset()) == {"ok": False, "stage": stage, "error": forged["error"]}


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
    reply = final({"ok": True, "rewards": rewards, "metrics": {}}, frozenset())
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
    assert final({"ok": True, "rewards": {"r": {"score": 1e300, "weight": 1}}}, frozenset()) == {
        "ok": True
    }


def test_a_tool_call_reports_load_only_before_its_toolsets_were_set_up() -> None:
    final, broken, relay = call_check()
    load = {"ok": False, "stage": "load", "error": "ImportError: no toolset"}
    assert final(load, frozenset()) == load
    assert final(load, frozenset({"set_up"})) == {
        "ok": True,
        "text": load["error"],
        "is_error": True,
    }
    assert broken("a forged line")["is_error"] is True
    assert relay is None


class Asked:
    """The server's side of a rollout's turns: records what it is asked, replies in turn."""

    def __init__(self, *replies: str) -> None:
        self.asked: list[list[dict[str, Any]]] = []
        self.replies = list(replies)

    def __call__(self, new: list[dict[str, Any]]) -> dict[str, Any]:
        self.asked.append(new)
        return {"reply": self.replies.pop(0)}


OPENING = [{"role": "system", "content": "Guess."}, {"role": "user", "content": "1 to 9?"}]


def test_a_transcript_asks_only_each_prompts_new_messages() -> None:
    server = Asked("5", "7")
    transcript = Transcript(server)
    assert transcript(OPENING) == {"reply": "5"}
    then = [*OPENING, {"role": "assistant", "content": "5"}, {"role": "user", "content": "higher"}]
    assert transcript(then) == {"reply": "7"}
    assert server.asked == [OPENING, [{"role": "user", "content": "higher"}]]
    assert transcript.rewritten is None


@pytest.mark.parametrize(
    ("then", "why"),
    [
        (  # the policy's reply, rewritten
            [*OPENING, {"role": "assistant", "content": "6"}, {"role": "user", "content": "no"}],
            "message 2 (assistant)",
        ),
        (  # an earlier message of the environment's, rewritten
            [
                OPENING[0],
                {"role": "user", "content": "1 to 5?"},
                {"role": "assistant", "content": "5"},
            ],
            "message 1 (user)",
        ),
        (OPENING[:1], "fewer than the 3 exchanged"),
    ],
)
def test_a_prompt_that_rewrites_the_conversation_ends_the_exchange(
    then: list[dict[str, Any]], why: str
) -> None:
    server = Asked("5", "7")
    transcript = Transcript(server)
    transcript(OPENING)
    assert transcript(then) == {"end": "history_rewritten"}
    assert transcript.rewritten is not None and why in transcript.rewritten
    assert len(server.asked) == 1  # the rewritten prompt never reached the policy


def test_a_rewritten_conversation_fails_as_history_whatever_the_child_replied() -> None:
    transcript = Transcript(Asked("5"))
    check = rewritten_check(reply_check(("score", "episode"), legacy_scoring), transcript)
    assert check.final(HONEST, frozenset()) == HONEST
    assert check.relay is not None
    check.relay({"turn": OPENING})
    check.relay({"turn": [{"role": "user", "content": "rewritten"}]})
    reply = check.final(HONEST, frozenset())
    assert (reply["ok"], reply["stage"]) == (False, "history")
    # A child's own `history` is not the worker's verdict: its code failed the scoring.
    forged = {"ok": False, "stage": "history", "error": "forged"}
    assert reply_check(("score", "episode"), legacy_scoring).final(forged, frozenset()) == {
        **forged,
        "stage": "score",
    }
