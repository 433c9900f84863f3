"""`to_scored_data` and the pusher's group selection: Atropos's `ScoredData` from agentroll
trajectories (atroposlib 0.4.0 `atroposlib/api/server.py`), without a server."""

from typing import Any

import pytest

from agentroll.server.schema import AgentTrace, Segment, Trajectory
from agentroll.trainer_clients.adapters.atropos import _groups, to_scored_data
from agentroll.trainer_clients.groups import Group

MODE = "processed_logprobs"


def _segment(start: int, end: int) -> Segment:
    return Segment(
        start=start,
        end=end,
        backend_id="b",
        policy_version=1,
        finish_reason="stop",
        logprobs_mode=MODE,
    )


def _trajectory(job_id: str, **fields: Any) -> Trajectory:
    base: dict[str, Any] = {
        "job_id": job_id,
        "group_id": "g",
        "handler": "h",
        "prompt_ids": [1, 2],
        "response_ids": [10, 11, 90, 20],
        "response_mask": [1, 1, 0, 1],
        "response_logprobs": [-0.1, -0.2, 0.0, -0.4],
        "segments": [_segment(0, 2), _segment(3, 4)],
        "logprobs": {"mode": MODE, "temperature": 0.7},
        "reward": 0.5,
        "outcome": "ok",
        "status": "completed",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}],
    }
    return Trajectory.model_validate({**base, **fields})


def test_a_group_becomes_aligned_tokens_masks_and_logprobs() -> None:
    body = to_scored_data([_trajectory("a"), _trajectory("b", reward=0.0)], env_id=3)
    assert body["tokens"] == [[1, 2, 10, 11, 90, 20]] * 2
    assert body["masks"] == [[-100, -100, 10, 11, -100, 20]] * 2
    assert body["inference_logprobs"] == [[1.0, 1.0, -0.1, -0.2, 1.0, -0.4]] * 2
    assert body["scores"] == [0.5, 0.0]  # a scored 0 is sent: it is the policy's
    assert body["env_id"] == 3
    assert body["generation_params"] == {
        "mode": "processed_logprobs",
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
    }
    # Atropos refuses a message without `content`: the handler's bare one gets the key.
    assert body["messages"][0] == [
        {"role": "user", "content": "hi"},
        {"content": None, "role": "assistant"},
    ]


def test_a_sample_without_a_reward_is_never_scored() -> None:
    failed = _trajectory("b", reward=None, outcome="infra_error", status="failed")
    with pytest.raises(ValueError, match="b: outcome infra_error has no reward"):
        to_scored_data([_trajectory("a"), failed])
    cancelled = _trajectory("c", reward=None, outcome="cancelled", status="cancelled")
    with pytest.raises(ValueError, match="c: outcome cancelled has no reward"):
        to_scored_data([cancelled])


def test_multi_agent_episodes_are_refused_not_sent_empty() -> None:
    trace = AgentTrace(name="solver", policy="default", trainable=True)
    episode = _trajectory(
        "m", response_ids=[], response_mask=[], response_logprobs=[], segments=[], agents=[trace]
    )
    with pytest.raises(ValueError, match="multi-agent episodes"):
        to_scored_data([episode])


def test_groups_are_sent_whole_or_left_out_with_the_reason() -> None:
    failed = _trajectory("y1", group_id="y", reward=None, outcome="infra_error", status="failed")
    invalid = Group(group_id="z", n=2, valid=False, trajectories=[], reason="retries exhausted")
    whole = Group(group_id="w", n=1, valid=True, trajectories=[_trajectory("w0", group_id="w")])
    items = [_trajectory("x0", group_id="x"), _trajectory("y0", group_id="y"), failed]
    skipped: dict[str, str] = {}
    kept = _groups([*items, invalid, whole], skipped)
    assert [(g, [t.job_id for t in samples]) for g, samples in kept] == [
        ("x", ["x0"]),
        ("w", ["w0"]),
    ]
    assert skipped == {
        "y": "y1: outcome infra_error has no reward",
        "z": "invalid: retries exhausted",
    }
