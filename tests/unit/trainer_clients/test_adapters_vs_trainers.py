"""The OpenRLHF and NeMo RL adapters' output, fed through each trainer's advantage computation.

OpenRLHF and NeMo RL do not install here (OpenRLHF needs CUDA-only wheels; NeMo RL is not on
PyPI). So each check below is written from the trainer's source at a named commit, in numpy,
step for step (verl does install: test_adapters_vs_verl.py runs its own code on this batch):

- OpenRLHF 3c3be62: `openrlhf/trainer/ppo_utils/experience_maker.py`
  (`compute_advantages_and_returns`, group_norm, `get_cumulative_returns`) and
  `openrlhf/models/utils.py` (`compute_reward`: the reward on the last action token);
- NeMo RL 7ea279a: `nemo_rl/algorithms/grpo.py` (`extract_initial_prompt_messages`,
  `add_grpo_token_loss_masks_and_generation_logprobs`), `nemo_rl/algorithms/utils.py`
  (`calculate_baseline_and_std_per_prompt`) and `advantage_estimator.py` (GRPO).

The batch mixes what goes wrong in agent RL: a rollout ended by context overflow (its last
tokens are an observation), an empty response, a zero-variance group, a group with a sample
the server sent without a reward, and a multi-agent episode.
"""

from typing import Any

import pytest

from agentroll.server.schema import Segment, Trajectory
from agentroll.trainer_clients import Group

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    pad_batch,
    policy_trajectories,
    to_nemo_rl,
    to_openrlhf,
)

PROMPT_A, PROMPT_Z = [5, 6, 7], [8, 9]


def sample(
    job_id: str, prompt: list[int], turns: list[tuple[list[int], list[int]]], reward: float | None,
    **fields: Any,
) -> Trajectory:  # fmt: skip
    """turns: (sampled ids, observed ids after them); a sampled token's logprob is -id/100."""
    ids: list[int] = []
    mask: list[int] = []
    segments = []
    for sampled, observed in turns:
        end = len(ids) + len(sampled)
        segments.append(Segment(start=len(ids), end=end, backend_id="b", policy_version=1,
                                finish_reason="stop"))  # fmt: skip
        ids += sampled + observed
        mask += [1] * len(sampled) + [0] * len(observed)
    return Trajectory(
        job_id=job_id,
        group_id=job_id.split("-", maxsplit=1)[0],
        handler="h",
        prompt_ids=prompt,
        response_ids=ids,
        response_mask=mask,
        response_logprobs=[-i / 100 if m else 0.0 for i, m in zip(ids, mask, strict=True)],
        segments=segments,
        policy_versions=[1],
        reward=reward,
        outcome=fields.pop("outcome", "ok"),
        status="completed",
        **fields,
    )


OVERFLOW = sample("a-s0", PROMPT_A, [([21, 22], [31, 32])], 1.0, finish_reason="length")
PLAIN = sample("a-s1", PROMPT_A, [([23], [33]), ([24, 25], [])], 0.0)
EMPTY = sample("a-s2", PROMPT_A, [], 1.0)
SHORT = sample("a-s3", PROMPT_A, [([26], [])], 0.0)
FLAT = [sample(f"z-s{k}", PROMPT_Z, [([40 + k], [])], 1.0) for k in range(4)]
REWARDLESS = [
    sample("n-s0", [1], [([2], [])], 1.0),
    sample("n-s1", [1], [([3], [])], None, outcome="timed_out"),
]


def batch_items() -> list[Group]:
    return [
        Group("a", 4, True, [OVERFLOW, PLAIN, EMPTY, SHORT]),
        Group("z", 4, True, FLAT),
        Group("n", 2, True, REWARDLESS),
    ]


GRPO_A = [0.866, -0.866, 0.866, -0.866]  # rewards [1, 0, 1, 0]: mean 0.5, sample std 0.577


# -- OpenRLHF 3c3be62 -----------------------------------------------------------------------
def openrlhf_group_norm_advantages(exp: dict[str, Any], n: int) -> Any:
    index = np.asarray(exp["index"])
    rewards = np.empty_like(exp["rewards"], dtype=np.float64)
    rewards[index] = exp["rewards"]
    rewards = rewards.reshape(-1, n)
    rewards = (rewards - rewards.mean(-1, keepdims=True)) / (
        rewards.std(-1, ddof=1, keepdims=True) + 1e-9
    )
    rewards = rewards.reshape(-1)[index]
    action_mask = exp["action_mask"]
    A = action_mask.shape[1]
    eos = A - 1 - np.argmax(np.fliplr(action_mask.astype(np.int64)), axis=1)
    token_rewards = np.zeros(action_mask.shape)
    token_rewards[np.arange(len(eos)), eos] = rewards
    token_rewards = token_rewards * action_mask  # get_cumulative_returns masks first
    return np.cumsum(token_rewards[:, ::-1], axis=1)[:, ::-1]  # gamma = 1


def test_openrlhf_group_norm_sees_whole_groups_by_index() -> None:
    exp = to_openrlhf(pad_batch(batch_items()))
    assert exp["index"] == list(range(8)) and exp["truncated"].tolist()[:2] == [True, False]
    assert not {"action_log_probs", "advantages", "returns", "values", "kl"} & set(exp)
    adv = openrlhf_group_norm_advantages(exp, n=4)
    mask = exp["action_mask"]
    assert adv[0][mask[0]].tolist() == pytest.approx([GRPO_A[0]] * 2, abs=1e-3)
    assert adv[1][mask[1]].tolist() == pytest.approx([GRPO_A[1]] * 3, abs=1e-3)
    assert not mask[2].any()  # the empty response trains nothing, but counted in the mean
    assert np.abs(adv[4:]).max() == 0.0
    assert exp["rollout_log_probs"][1][mask[1]].tolist() == pytest.approx([-0.23, -0.24, -0.25])


def test_openrlhf_refuses_groups_it_would_misalign() -> None:
    uneven = [Group("a", 4, True, [OVERFLOW, PLAIN, EMPTY, SHORT]), Group("z", 2, True, FLAT[:2])]
    with pytest.raises(ValueError, match="equal group sizes"):
        to_openrlhf(pad_batch(uneven))


# -- NeMo RL 7ea279a ------------------------------------------------------------------------
def nemo_prompt_ids(rows: list[dict[str, Any]]) -> Any:
    prompts = []
    for row in rows:  # extract_initial_prompt_messages, by `length`
        kept, total = [], 0
        for message in row["message_log"]:
            if total >= row["length"]:
                break
            kept.append(message["token_ids"])
            total += len(message["token_ids"])
        prompts.append(np.concatenate(kept))
    width = max(len(p) for p in prompts)
    return np.stack([np.pad(p, (0, width - len(p))) for p in prompts])


def nemo_grpo(rows: list[dict[str, Any]], *, normalize: bool, loo: bool = True) -> Any:
    prompts = nemo_prompt_ids(rows)
    rewards = np.asarray([r["total_reward"] for r in rows], dtype=np.float64)
    baseline, std = np.zeros_like(rewards), np.zeros_like(rewards)
    for unique in np.unique(prompts, axis=0):
        idx = np.nonzero((prompts == unique).all(1))[0]
        if len(idx) <= 1:
            baseline[idx] = rewards[idx]
            continue
        k = len(idx) - int(loo)
        weights = np.ones((len(idx), len(idx))) - (np.eye(len(idx)) if loo else 0)
        baseline[idx] = weights @ rewards[idx] / k
        square = weights @ rewards[idx] ** 2 / k
        with np.errstate(divide="ignore", invalid="ignore"):  # torch: inf and nan, then
            factor = np.float64(k) / np.float64(k - 1)  # .sqrt().nan_to_num(0)
            std[idx] = np.nan_to_num(np.sqrt((square - baseline[idx] ** 2) * factor), nan=0.0)
    adv = rewards - baseline
    if normalize:
        adv[std > 0] = adv[std > 0] / (std[std > 0] + 1e-6)
    return adv


def test_nemo_rl_groups_by_prompt_and_gets_nonzero_advantages() -> None:
    rows = to_nemo_rl(batch_items())
    assert [r["extra_env_info"]["job_id"] for r in rows][:4] == ["a-s0", "a-s1", "a-s2", "a-s3"]
    assert [r["length"] for r in rows][:2] == [3, 3]  # the prompt's length, as NeMo RL reads it
    assert nemo_grpo(rows, normalize=False)[:4].tolist() == pytest.approx(
        [2 / 3, -2 / 3, 2 / 3, -2 / 3]
    )
    assert np.abs(nemo_grpo(rows, normalize=True)[4:]).max() == 0.0
    # control: were `length` the whole sequence, NeMo RL would see a group of one per sample
    whole = [{**r, "length": sum(len(m["token_ids"]) for m in r["message_log"])} for r in rows]
    assert np.abs(nemo_grpo(whole, normalize=False)).max() == 0.0
    assert [r["truncated"] for r in rows][:2] == [True, False]
    # the token loss mask NeMo RL derives (assistant messages with logprobs) is response_mask
    for row, t in zip(rows, [OVERFLOW, PLAIN, EMPTY, SHORT], strict=False):
        trained = [
            m["role"] == "assistant" and "generation_logprobs" in m for m in row["message_log"]
        ]
        derived = np.concatenate(
            [
                np.full(len(m["token_ids"]), int(on))
                for m, on in zip(row["message_log"], trained, strict=True)
            ]
        )
        assert derived.tolist() == [0] * len(t.prompt_ids) + t.response_mask


def test_nemo_rl_refuses_batches_it_would_group_differently() -> None:
    twin = Group("b", 1, True, [sample("b-s0", PROMPT_A, [([1], [])], 1.0)])
    with pytest.raises(ValueError, match="share one prompt"):
        to_nemo_rl([batch_items()[0], twin])
    split = Group("c", 2, True, [sample("c-s0", [1], [], 1.0), sample("c-s1", [2], [], 0.0)])
    with pytest.raises(ValueError, match="prompts differ"):
        to_nemo_rl([split])


def test_multi_agent_episodes_train_through_their_policy_views_only() -> None:
    from tests.unit.trainer_clients.test_adapters_agents import episode, trace

    group = Group("e", 2, True, [
        episode(f"e-s{k}", "e", float(k), trace("solver", "solver", 10), trace(
            "judge", "judge", 50, trainable=False)) for k in range(2)
    ])  # fmt: skip
    with pytest.raises(ValueError, match="policy_trajectories"):
        to_nemo_rl([group])
    views = policy_trajectories([group])
    assert set(views) == {"solver"}
    rows = to_nemo_rl(views["solver"])
    assert nemo_grpo(rows, normalize=False).tolist() == [-1.0, 1.0]
