"""The verl adapter's output, through verl's own code: verl 0.9.1 from PyPI, on CPU torch.

`make test` installs verl with `--no-deps` (tests/requirements-verl.txt) beside the lean
`verl-check` extra, which holds only what these imports need; where verl is missing, this
module is skipped.

Each test builds verl's `DataProto` from `to_verl` and does to it what verl's PPO trainer
(`RayPPOTrainer.fit`, verl/trainer/ppo/ray_trainer.py) does between generation and the actor
update: the reward from `rm_scores` (`extract_reward`), the actor's recomputed `old_log_probs`
(and, for GAE, the critic's `values`) `union`ed in, `token_level_rewards`, verl's own
`compute_advantage`, then its vanilla PPO policy loss. The batch is the mixed one of
test_adapters_vs_trainers: a rollout ended by context overflow (its last tokens are an
observation), an empty response, a zero-variance group, a group left out for a sample
without a reward.
"""

import warnings
from typing import Any

import pytest
from tests.unit.trainer_clients.test_adapters_vs_trainers import (
    GRPO_A,
    PROMPT_A,
    batch_items,
    sample,
)

from agentroll.trainer_clients import Group
from agentroll.trainer_clients.adapters import pad_batch, to_verl

torch = pytest.importorskip("torch", reason="the verl checks need the verl-check extra")
pytest.importorskip("verl", reason="the verl checks need tests/requirements-verl.txt")
with warnings.catch_warnings():  # verl warns about each GPU training engine it cannot load
    warnings.simplefilter("ignore")
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import AdvantageEstimator, get_policy_loss_fn
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.reward import extract_reward
    from verl.workers.config import ActorConfig

GRPO = AdvantageEstimator.GRPO
GAE = AdvantageEstimator.GAE
REINFORCE_PP = AdvantageEstimator.REINFORCE_PLUS_PLUS


def rollout_batch(items: list[Group] | None = None, **extra: Any) -> DataProto:
    """`to_verl` as verl's `DataProto`; `extra` adds batch tensors (the controls' bugs)."""
    d = to_verl(pad_batch(items or batch_items()))
    tensors = {k: torch.from_numpy(v) for k, v in d["batch"].items()}
    return DataProto.from_dict(
        tensors={**tensors, **extra}, non_tensors=d["non_tensor_batch"], meta_info=d["meta_info"]
    )


def after_generation(data: DataProto, estimator: AdvantageEstimator) -> DataProto:
    """What `RayPPOTrainer.fit` (verl 0.9.1) does to the rollout batch before the actor update;
    the actor's and critic's forward passes stand in as fixed tensors."""
    data.meta_info["global_token_num"] = data.batch["attention_mask"].sum(-1).tolist()
    for multi_modal_input in data.non_tensor_batch["multi_modal_inputs"]:  # as fit reads it
        assert "image_grid_thw" not in multi_modal_input
    reward_tensor, _ = extract_reward(data)
    # the actor recomputes logprobs on every column; they never equal the sampler's exactly
    recomputed = data.batch["rollout_log_probs"] - 0.01
    data = data.union(DataProto.from_dict(tensors={"old_log_probs": recomputed}))
    if estimator == GAE:
        data = data.union(DataProto.from_dict(tensors={"values": torch.zeros_like(recomputed)}))
    data.batch["token_level_scores"] = reward_tensor
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    return compute_advantage(
        data, adv_estimator=estimator, num_repeat=4, config=AlgoConfig(adv_estimator=estimator)
    )


def sampled(data: DataProto, row: int, name: str) -> list[float]:
    """`name` on the sampled tokens (response_mask 1) of one row."""
    mask = data.batch["response_mask"][row] == 1
    return data.batch[name][row][mask].tolist()


def test_verl_grpo_sees_whole_groups_and_trains_only_sampled_tokens() -> None:
    batch = pad_batch(batch_items())
    assert batch.skipped == {"n": "n-s1: outcome timed_out has no reward"}
    out = after_generation(rollout_batch(), GRPO)
    assert list(out.non_tensor_batch["uid"]) == ["a"] * 4 + ["z"] * 4
    # the empty response (row 2) trains nothing, but its reward 1 counts in the baseline
    assert sampled(out, 0, "advantages") == pytest.approx([GRPO_A[0]] * 2, abs=1e-3)
    assert sampled(out, 1, "advantages") == pytest.approx([GRPO_A[1]] * 3, abs=1e-3)
    assert sampled(out, 2, "advantages") == []
    assert sampled(out, 3, "advantages") == pytest.approx([GRPO_A[3]], abs=1e-3)
    advantages, mask = out.batch["advantages"], out.batch["response_mask"]
    assert advantages[4:].abs().max().item() == 0.0  # zero-variance group: nothing to learn
    assert (advantages * (1 - mask)).abs().max().item() == 0.0
    metrics = compute_data_metrics(out, use_critic=False)
    assert metrics["critic/score/max"] == 1.0
    assert metrics["response/aborted_ratio"] == pytest.approx(1 / 8)  # verl's name for empty


def test_verl_logprobs_line_up_with_the_sampled_tokens() -> None:
    out = after_generation(rollout_batch(), GRPO)
    mask = out.batch["response_mask"] == 1
    tokens = out.batch["responses"][mask].double()
    # a sampled token's logprob is -id/100 (see `sample`), in the token's own column
    assert out.batch["rollout_log_probs"][mask].tolist() == pytest.approx((-tokens / 100).tolist())
    assert sampled(out, 1, "rollout_log_probs") == pytest.approx([-0.23, -0.24, -0.25])
    assert out.batch["rollout_log_probs"][~mask].abs().max().item() == 0.0


def test_verl_policy_loss_reaches_exactly_the_sampled_tokens_with_an_advantage() -> None:
    out = after_generation(rollout_batch(), GRPO)
    log_prob = out.batch["old_log_probs"].clone().requires_grad_(True)
    actor = ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1)
    loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(
        old_log_prob=out.batch["old_log_probs"],
        log_prob=log_prob,
        advantages=out.batch["advantages"],
        response_mask=out.batch["response_mask"],
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
    )
    loss.backward()
    assert log_prob.grad is not None
    trained = log_prob.grad != 0
    expected = (out.batch["response_mask"] == 1) & (out.batch["advantages"] != 0)
    assert trained.tolist() == expected.tolist()
    assert int(trained.sum()) == 6  # rows 0, 1, 3: 2 + 3 + 1 sampled tokens
    # token-mean over the 10 sampled tokens of the batch, at ratio 1: -(2a - 3a - a) / 10
    assert loss.item() == pytest.approx(2 * GRPO_A[0] / 10, abs=1e-3)


MULTI_TURN = [
    Group("m", 2, True, [
        sample("m-s0", PROMPT_A, [([21], [31]), ([22], [32, 33])], 1.0, finish_reason="length"),
        sample("m-s1", PROMPT_A, [([23], [])], 0.0),
    ]),
]  # fmt: skip


@pytest.mark.parametrize("estimator", [REINFORCE_PP, GAE])
def test_verl_returns_reach_every_turn_of_an_overflowed_rollout(estimator: Any) -> None:
    out = after_generation(rollout_batch(MULTI_TURN), estimator)
    # its last tokens are an observation: the reward still reaches both sampled turns
    assert sampled(out, 0, "returns") == [1.0, 1.0]
    first, second = sampled(out, 0, "advantages")
    assert first == pytest.approx(second) and first > 0


@pytest.mark.parametrize("estimator", [REINFORCE_PP, GAE])
def test_control_a_reward_on_the_last_attended_token_never_reaches_training(
    estimator: Any,
) -> None:
    """Where verl's own agent loop puts the reward (the last attended response token), an
    overflowed rollout's reward sits on an observation, and verl's estimators drop it."""
    data = rollout_batch(MULTI_TURN)
    prompt_len = data.batch["prompts"].shape[1]
    last_attended = data.batch["attention_mask"][:, prompt_len:].sum(-1) - 1
    rewards = data.batch["rm_scores"].sum(-1)
    on_observation = torch.zeros_like(data.batch["rm_scores"])
    on_observation[torch.arange(len(rewards)), last_attended] = rewards
    data.batch["rm_scores"] = on_observation
    out = after_generation(data, estimator)
    assert sampled(out, 0, "returns") == [0.0, 0.0]


def test_control_verl_refuses_an_adapter_that_sets_what_the_trainer_recomputes() -> None:
    data = rollout_batch()
    with_old = rollout_batch(old_log_probs=data.batch["rollout_log_probs"])
    with pytest.raises(AssertionError, match="old_log_probs"):
        after_generation(with_old, GRPO)
    # and one without the non-tensor field the trainer reads for every batch
    data.non_tensor_batch.pop("multi_modal_inputs")
    with pytest.raises(KeyError, match="multi_modal_inputs"):
        after_generation(data, GRPO)
