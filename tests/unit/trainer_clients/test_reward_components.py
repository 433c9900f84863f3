"""Named reward components: a typed optional trajectory field, absent (and the JSON as before)
when a handler reports none, passed on by every adapter."""

import math

import pytest
from pydantic import ValidationError

from agentroll.server.schema import Trajectory

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    pad_batch,
    to_nemo_rl,
    to_openrlhf,
    to_verl,
)


def traj(job_id: str, reward: float, components: dict[str, float] | None) -> Trajectory:
    return Trajectory(
        job_id=job_id,
        group_id="g",
        handler="h",
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        response_mask=[1, 1],
        response_logprobs=[-0.5, -0.25],
        reward=reward,
        reward_components=components,
        outcome="ok",
        status="completed",
    )


def test_without_components_the_json_has_no_key_and_reads_back_as_none() -> None:
    plain = traj("g-s0", 1.0, None)
    assert "reward_components" not in plain.model_dump_json()
    assert Trajectory.model_validate_json(plain.model_dump_json()).reward_components is None


def test_components_travel_on_the_wire() -> None:
    scored = traj("g-s0", 1.0, {"correct": 1.0, "format": 0.5})
    back = Trajectory.model_validate_json(scored.model_dump_json())
    assert back.reward_components == {"correct": 1.0, "format": 0.5}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reward_components": {"x": math.nan}}, "reward component 'x' is not finite"),
        ({"reward_components": {"x": math.inf}}, "reward component 'x' is not finite"),
        ({"reward_components": {f"c{i}": 0.0 for i in range(33)}}, "at most 32 items"),
        ({"reward_components": {"": 0.0}}, "at least 1 character"),
        (
            {
                "outcome": "infra_error",
                "status": "failed",
                "reward": None,
                "reward_components": {"x": 0.0},
            },
            "an infra_error trajectory carries no reward",
        ),
    ],
)
def test_components_that_mean_nothing_are_refused(fields: dict[str, object], message: str) -> None:
    base = traj("g-s0", 1.0, None).model_dump()
    with pytest.raises(ValidationError, match=message):
        Trajectory.model_validate({**base, **fields})


def test_the_padded_batch_has_one_column_per_name_nan_where_absent() -> None:
    batch = pad_batch(
        [
            traj("g-s0", 1.0, {"correct": 1.0, "format": 0.5}),
            traj("g-s1", 0.0, {"correct": 0.0}),  # its handler said nothing of format
        ]
    )
    assert sorted(batch.reward_components) == ["correct", "format"]
    assert batch.reward_components["correct"].tolist() == [1.0, 0.0]
    fmt = batch.reward_components["format"]
    assert fmt[0] == 0.5 and math.isnan(fmt[1])  # missing is not 0
    assert batch.rewards.tolist() == [1.0, 0.0]  # the trained reward is untouched


def test_every_adapter_passes_them_on() -> None:
    items = [traj("g-s0", 1.0, {"correct": 1.0}), traj("g-s1", 0.0, {"correct": 0.0})]
    batch = pad_batch(items)
    verl = to_verl(batch)["non_tensor_batch"]
    assert verl["reward_components/correct"].tolist() == [1.0, 0.0]
    assert to_openrlhf(batch)["info"]["reward_components/correct"].tolist() == [1.0, 0.0]
    # NeMo RL groups by prompt: one group, one prompt
    rows = to_nemo_rl(items)
    assert [r["extra_env_info"]["reward_components"] for r in rows] == [
        {"correct": 1.0},
        {"correct": 0.0},
    ]


def test_without_components_the_adapters_output_what_they_did_before() -> None:
    items = [traj("g-s0", 1.0, None), traj("g-s1", 0.0, None)]
    batch = pad_batch(items)
    assert batch.reward_components == {}
    assert set(to_verl(batch)["non_tensor_batch"]) == {"uid", "multi_modal_inputs"}
    assert set(to_openrlhf(batch)["info"]) == {"rollout_logprobs"}
    assert set(to_nemo_rl(items)[0]["extra_env_info"]) == {
        "job_id",
        "group_id",
        "policy_versions",
        "logprobs",
    }
