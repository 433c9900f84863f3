"""Adapters: every array lines up with the trajectory it came from, token for token."""

import subprocess
import sys

import pytest

from agentroll.server.schema import Segment, Trajectory
from agentroll.trainer_clients import Group

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    grpo_advantages,
    pad_batch,
    to_nemo_rl,
    to_openrlhf,
    to_verl,
)


def traj(
    job_id: str, prompt: list[int], turns: list[tuple[list[int], list[int]]], reward: float
) -> Trajectory:
    """turns: (sampled ids, observation ids after them); logprobs are -id/100 for checking."""
    ids: list[int] = []
    mask: list[int] = []
    segments = []
    for sampled, observed in turns:
        segments.append(
            Segment(
                start=len(ids),
                end=len(ids) + len(sampled),
                backend_id="b",
                policy_version=2,
                finish_reason="stop",
            )
        )
        ids += sampled + observed
        mask += [1] * len(sampled) + [0] * len(observed)
    logprobs = [-i / 100 if m else 0.0 for i, m in zip(ids, mask, strict=True)]
    return Trajectory(
        job_id=job_id,
        group_id=job_id.split("-", maxsplit=1)[0],
        handler="h",
        prompt_ids=prompt,
        response_ids=ids,
        response_mask=mask,
        response_logprobs=logprobs,
        segments=segments,
        policy_versions=[2],
        reward=reward,
        outcome="ok",
        status="completed",
    )


A = traj("g0-s0-r0", [11, 12, 13], [([21, 22], [31, 32, 33]), ([23], [])], 1.0)
B = traj("g0-s1-r0", [11, 12, 13, 14, 15], [([41, 42, 43, 44], [])], 0.0)
C = traj("g1-s0-r0", [16], [([51], [61]), ([52, 53], [62])], 0.5)
D = traj("g1-s1-r0", [16], [([54], [])], 0.5)


def groups() -> list[Group]:
    return [Group("g0", 2, True, [A, B]), Group("g1", 2, True, [C, D])]


def test_padded_batch_places_every_token_mask_and_logprob_exactly() -> None:
    batch = pad_batch(groups())
    assert batch.prompt_len == 5 and batch.response_len == 6
    assert batch.input_ids.shape == batch.attention_mask.shape == (4, 11)
    assert batch.loss_mask.shape == batch.old_logprobs.shape == (4, 11)
    for row, t in enumerate([A, B, C, D]):
        p, r = len(t.prompt_ids), len(t.response_ids)
        assert batch.input_ids[row, 5 - p : 5].tolist() == t.prompt_ids
        assert batch.input_ids[row, 5 : 5 + r].tolist() == t.response_ids
        assert batch.attention_mask[row].tolist() == [0] * (5 - p) + [1] * (p + r) + [0] * (6 - r)
        assert batch.loss_mask[row, 5 : 5 + r].tolist() == t.response_mask
        assert batch.loss_mask[row, :5].sum() == 0 and batch.loss_mask[row, 5 + r :].sum() == 0
        assert batch.old_logprobs[row, 5 : 5 + r].tolist() == pytest.approx(t.response_logprobs)
        # logprob of column c belongs to the token in column c
        sampled = batch.loss_mask[row] == 1
        assert batch.old_logprobs[row][sampled].tolist() == pytest.approx(
            (-batch.input_ids[row][sampled] / 100).tolist()
        )
        first = 5 - p
        assert batch.position_ids[row, first : 5 + r].tolist() == list(range(p + r))
    assert batch.job_ids == ["g0-s0-r0", "g0-s1-r0", "g1-s0-r0", "g1-s1-r0"]
    assert batch.rewards.tolist() == [1.0, 0.0, 0.5, 0.5]


def test_grpo_advantages_are_normalised_within_each_group() -> None:
    adv = grpo_advantages([1.0, 0.0, 1.0, 0.5, 0.5, 2.0], ["a", "a", "a", "b", "b", "c"])
    # group a: mean 2/3, sample std 0.577
    assert adv[:3].tolist() == pytest.approx([0.57735, -1.1547, 0.57735], abs=1e-4)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]  # equal rewards, and a group of one
    raw = grpo_advantages([1.0, 0.0], ["a", "a"], scale=False)
    assert raw.tolist() == [0.5, -0.5]
    batch = pad_batch(groups())
    assert batch.advantages.tolist() == pytest.approx([0.7071, -0.7071, 0.0, 0.0], abs=1e-4)
    assert (batch.token_advantages[0] != 0).sum() == sum(A.response_mask)


def test_invalid_groups_and_rewardless_samples_are_left_out_whole() -> None:
    invalid = Group("g9", 2, False, [A], reason="cannot complete")
    broken = Trajectory(job_id="x", handler="h", outcome="infra_error", status="failed")
    batch = pad_batch([invalid, *groups(), broken])
    assert batch.job_ids == ["g0-s0-r0", "g0-s1-r0", "g1-s0-r0", "g1-s1-r0"]
    assert batch.skipped == {
        "g9": "invalid: cannot complete",
        "x": "x: outcome infra_error has no reward",
    }
    with pytest.raises(ValueError, match="nothing to batch"):
        pad_batch([broken])


def test_verl_fields_slice_the_response_columns() -> None:
    d = to_verl(pad_batch(groups()))
    t = d["batch"]
    assert t["prompts"].shape == (4, 5) and t["responses"].shape == (4, 6)
    assert (t["input_ids"] == np.concatenate([t["prompts"], t["responses"]], axis=1)).all()
    assert t["response_mask"][0].tolist() == A.response_mask
    assert t["rollout_log_probs"][0].tolist() == pytest.approx(A.response_logprobs)
    # the reward sits on the last sampled response token
    assert t["rm_scores"][0].tolist() == [0, 0, 0, 0, 0, 1.0]
    assert t["rm_scores"][1].tolist() == [0.0] * 6  # reward 0
    assert t["rm_scores"][2].tolist() == [0, 0, 0, 0.5, 0, 0]  # C ends on an observation
    assert t["rm_scores"][3].tolist() == [0.5, 0, 0, 0, 0, 0]
    assert d["non_tensor_batch"]["uid"].tolist() == ["g0", "g0", "g1", "g1"]


def test_openrlhf_actions_are_the_last_response_columns() -> None:
    d = to_openrlhf(pad_batch(groups()))
    assert d["sequences"].shape == (4, 11) and d["action_mask"].shape == (4, 6)
    assert d["action_mask"].dtype == bool
    assert d["sequences"][2, -6:][d["action_mask"][2]].tolist() == [51, 52, 53]
    assert d["rollout_log_probs"][2][d["action_mask"][2]].tolist() == pytest.approx(
        [-0.51, -0.52, -0.53]
    )
    assert d["response_length"].tolist() == [6, 4, 5, 1]
    assert d["total_length"].tolist() == [9, 9, 6, 2]
    assert d["rewards"].tolist() == [1.0, 0.0, 0.5, 0.5] and d["index"] == [0, 1, 2, 3]


def test_nemo_rl_message_log_rebuilds_the_token_stream_exactly() -> None:
    rows = to_nemo_rl([A, C])
    assert [r["extra_env_info"]["group_id"] for r in rows] == ["g0", "g1"]
    log = rows[0]["message_log"]
    assert [m["role"] for m in log] == ["user", "assistant", "environment", "assistant"]
    assert np.concatenate([m["token_ids"] for m in log]).tolist() == A.prompt_ids + A.response_ids
    for m in log:
        if m["role"] == "assistant":
            assert m["generation_logprobs"].shape == m["token_ids"].shape
            assert m["generation_logprobs"].tolist() == pytest.approx(
                (-m["token_ids"] / 100).tolist()
            )
        else:
            assert "generation_logprobs" not in m
    assert rows[0]["total_reward"] == 1.0 and rows[0]["length"] == 3  # the prompt's


def test_client_import_does_not_need_numpy_and_adapters_say_how_to_get_it() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy': raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import agentroll.trainer_clients\n"
        "try:\n"
        "    import agentroll.trainer_clients.adapters\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install numpy" in out.stdout
