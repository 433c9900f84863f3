"""The `verifiers` handler with a taskset whose package exports its own `vf.Env`, end to end:
the environment's `run()` (`agentroll-vf-guess` in `tests/fixtures/verifiers_env_pkg`: a
guessing game answering `higher` / `lower` after each guess) drives the policy's turns from
inside its confined worker, a real `agentroll serve` samples each reply from the scripted
backend (`guess`: a binary search). Rewards equal what the environment's own reward functions
give on the same conversation, computed by verifiers itself; tokens are the backend's, the
environment's messages between them masked out; an environment a reply breaks is a 0, one
broken for everyone is infra_error."""

import copy
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.verifiers_reference import (
    PACKAGE,
    reference_rewards,
    run_killing_workers,
    run_verifiers_jobs,
)

from agentroll.handlers.builtin.control import CONTROLS
from agentroll.handlers.builtin.verifiers_env import verifiers_instances
from agentroll.server.schema import Outcome, Trajectory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

TASKSET = "agentroll-vf-guess"


async def play(
    agentroll_server: ServerFactory, tmp_path: Path, instances: list[dict[str, Any]]
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    return await run_verifiers_jobs(
        agentroll_server, tmp_path, instances, policy="guess", group_id="guess"
    )


async def test_the_environments_own_run_drives_the_turns_with_exact_tokens(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    CONTROLS.clear()
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    assert [i["task"]["id"] for i in instances] == [f"guess-{k}" for k in range(5)]
    honest = instances[:3]  # targets 7, 3 and 10

    results, log = await play(agentroll_server, tmp_path, honest)

    said = {j: [(m["role"], m["content"]) for m in t.messages[1:]] for j, t in results.items()}
    assert said == {  # the environment's own feedback between the policy's guesses
        "guess-0": [
            ("assistant", "5"), ("user", "higher"), ("assistant", "8"), ("user", "lower"),
            ("assistant", "6"), ("user", "higher"), ("assistant", "7"),
        ],
        "guess-1": [
            ("assistant", "5"), ("user", "lower"), ("assistant", "2"), ("user", "higher"),
            ("assistant", "3"),
        ],
        "guess-2": [
            ("assistant", "5"), ("user", "higher"), ("assistant", "8"), ("user", "higher"),
            ("assistant", "9"), ("user", "higher"), ("assistant", "10"),
        ],
    }  # fmt: skip
    expected = await reference_rewards(TASKSET, [(j, list(t.messages)) for j, t in results.items()])
    # found (weight 1) + quick (weight 0.5: one over the guesses)
    assert expected == pytest.approx({"guess-0": 1.125, "guess-1": 1 + 0.5 / 3, "guess-2": 1.125})
    assert {j: t.reward for j, t in results.items()} == expected, {
        j: (t.outcome, t.error, t.reward_info) for j, t in results.items()
    }
    assert all(t.outcome is Outcome.ok for t in results.values())

    # Tokens exact: one backend call per guess, its ids and logprobs verbatim; the
    # environment's feedback between two guesses is masked out. (The three games open on
    # the same prompt: a segment is one of the calls made on its prompt.)
    assert len(log) == 4 + 3 + 4
    for t in results.values():
        guesses = sum(1 for m in t.messages if m["role"] == "assistant")
        assert len(t.segments) == guesses
        for k, seg in enumerate(t.segments):
            prompt = t.prompt_ids + t.response_ids[: seg.start]
            sampled = (
                t.response_ids[seg.start : seg.end],
                t.response_logprobs[seg.start : seg.end],
            )
            calls = [
                (list(c["token_ids"]), list(c["logprobs"]))
                for c in log
                if list(c["prompt_token_ids"]) == prompt
            ]
            assert sampled in calls
            assert t.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
            if k:
                between = range(t.segments[k - 1].end, seg.start)
                assert between and all(t.response_mask[i] == 0 for i in between)


async def test_an_environment_a_reply_breaks_is_zero_and_one_broken_for_all_is_infra(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Blame by a control, the same episode with an empty reply to every turn: `BOOM` makes
    the environment's code raise, but empty replies play through, so the reply broke it;
    a task whose environment raises before any turn fails on the control too. Beside them,
    an honest game still earns its reward."""
    CONTROLS.clear()
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    chosen = [i for i in instances if i["task"]["id"] in {"guess-1", "guess-3", "guess-4"}]

    results, _ = await play(agentroll_server, tmp_path, chosen)

    outcomes = {j: (t.outcome, t.reward) for j, t in results.items()}
    errors = {j: t.error for j, t in results.items()}
    assert outcomes == {
        "guess-1": (Outcome.ok, pytest.approx(1 + 0.5 / 3)),
        "guess-3": (Outcome.ok, 0.0),
        "guess-4": (Outcome.infra_error, None),
    }, errors
    boom = results["guess-3"].reward_info
    assert boom["reason"] == "environment_failed_on_answer" and boom["control"]["passed"]
    assert "RuntimeError: the reply broke the environment" in boom["failure"]
    assert boom["reply"] == "BOOM"
    broken = results["guess-4"].error
    assert broken is not None and broken.type == "verifiers_env_failed"
    assert "this task's environment is broken" in broken.message
    assert "control" in broken.message


async def test_a_worker_killed_under_an_honest_episode_plays_it_again_and_grades_it(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The OOM killer (here: the test) ends the workers once the policy's first guess of an
    honest game (target 7, each of the environment's answers 1 s in coming) is sampled: the
    episode is played again in a fresh worker, answered with the guess already sampled, then
    sampled on, and graded as it stands, never blamed on the replies (a reply that breaks the
    environment both times is 0: the `BOOM` test)."""
    CONTROLS.clear()
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    slow = copy.deepcopy(instances[0])
    slow["task"]["step_s"] = 1.0
    job = {"job_id": "killed", "handler": "verifiers", "instance": slow}

    t, killed, log = await run_killing_workers(agentroll_server, tmp_path, job, "guess")
    assert killed
    assert (t.outcome, t.reward) == (Outcome.ok, pytest.approx(1.125)), (t.error, t.reward_info)
    assert t.reward_info["rollout_attempts"] == 2
    replies = [m["content"] for m in t.messages if m["role"] == "assistant"]
    assert replies == ["5", "8", "6", "7"] and len(log) == 4  # nothing sampled twice
