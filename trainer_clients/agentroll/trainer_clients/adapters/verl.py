"""verl's `DataProto` fields, as numpy arrays.

Checked against verl 0.9.1 (PyPI): the tests build verl's own `DataProto` from this output and
run it through what its PPO trainer does after generation (`verl/trainer/ppo/ray_trainer.py`:
`extract_reward`, the `union` with the recomputed `old_log_probs`, `compute_advantage` with
GRPO / GAE / REINFORCE++, `compute_data_metrics`) and its policy loss (`core_algos`).

| verl key                            | shape    | from agentroll                                  |
|-------------------------------------|----------|-------------------------------------------------|
| batch.prompts                       | (B, P)   | prompt_ids, left-padded                         |
| batch.responses                     | (B, R)   | response_ids, right-padded                      |
| batch.input_ids                     | (B, P+R) | prompts ++ responses                            |
| batch.attention_mask                | (B, P+R) | 1 on real tokens                                |
| batch.position_ids                  | (B, P+R) | cumsum(attention_mask) - 1                      |
| batch.response_mask                 | (B, R)   | response_mask (0 on tool output, glue, padding) |
| batch.rollout_log_probs             | (B, R)   | the sampler's logprobs (0.0 where mask is 0)    |
| batch.rm_scores                     | (B, R)   | the reward on the last *sampled* token, else 0  |
| batch.routed_experts (MoE only)     | (B, P+R, | int16 experts each input token was routed to,   |
|                                     | L, K)    | for router replay (below)                       |
| non_tensor_batch.uid                | (B,)     | group_id (GRPO, RLOO, ... group samples by uid) |
| non_tensor_batch.multi_modal_inputs | (B,)     | {} each (the trainer reads it for every batch)  |
| non_tensor_batch.reward_components/<name> | (B,) | a named reward component (NaN where absent), |
|                                     |          | present only when a handler reported components |
| meta_info.rollout_logprobs          | list     | per sample: what rollout_log_probs are (below)  |
| meta_info.chain_kinds, episode_ids  | list     | per row: its token chain's kind, its episode    |

`rollout_log_probs` are what the engine returned: raw (before temperature, top-k and top-p)
or processed, as each sample's declaration says (`mode`, `temperature`, `top_p`, `top_k`).
verl recomputes `old_log_probs` from the raw model (temperature applied, no top-k/top-p),
so rollout correction compares like with like only under that sampling. `routed_experts`
is laid out as verl's own agent loop lays it out (rows from the first prompt column, zeros
where nothing was read), the key its router replay (R3) reads; present only when every
sample carries routing (an MoE engine started with `--enable-return-routed-experts`).

Where the reward sits matters: verl's GAE and REINFORCE++ carry a reward back only from a
token with response_mask 1 (past observation spans, but never from one), so a rollout that
ended by context overflow (its last tokens are an observation, mask 0) gets it on its last
sampled token, not its last token (where verl's own agent loop would put it, and lose it).
A sample with no sampled token at all (an empty response) gets it on column 0: GRPO sums the
row, so the group's baseline still counts it, and nothing of it is trained.

Harness chains (`pad_batch(..., chains=...)`): a chain's row carries its episode's uid and
reward. verl computes GRPO itself, per uid over rows, so there an episode with more chosen
chains weighs more in its group's mean; agentroll's own `batch.advantages` (the episode's
advantage on each of its rows) does not, for an estimator that takes advantages as given.

Left out on purpose, because verl computes them itself: `old_log_probs` (recomputed by the
actor; `DataProto.union` refuses a batch that already holds a different one: use
`rollout_log_probs`, which verl's rollout correction and bypass mode read),
`token_level_scores` / `token_level_rewards` (taken from `rm_scores`) and `advantages` /
`returns` (from `compute_advantage`).

    from verl import DataProto
    d = to_verl(pad_batch(groups))
    proto = DataProto.from_dict(
        tensors={k: torch.from_numpy(v) for k, v in d["batch"].items()},
        non_tensors=d["non_tensor_batch"], meta_info=d["meta_info"])
"""

from typing import Any

import numpy as np

from agentroll.trainer_clients.adapters.batch import PaddedBatch


def last_sampled_column(mask: Any) -> Any:
    """Per row, the column of the last 1 in `mask` (0 for a row without one)."""
    columns = np.arange(mask.shape[1])
    return np.where(mask == 1, columns, -1).max(axis=1).clip(min=0)


def to_verl(batch: PaddedBatch) -> dict[str, Any]:
    """The batch as verl's `DataProto` tensors (table above)."""
    mask = batch.response("loss_mask")
    scores = np.zeros(mask.shape, dtype=np.float32)
    scores[np.arange(len(scores)), last_sampled_column(mask)] = batch.rewards
    components = {f"reward_components/{k}": v for k, v in batch.reward_components.items()}
    tensors = {
        "prompts": batch.input_ids[:, : batch.prompt_len],
        "responses": batch.response("input_ids"),
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
        "response_mask": mask,
        "rollout_log_probs": batch.response("old_logprobs"),
        "rm_scores": scores,
    }
    if batch.routed_experts is not None:
        tensors["routed_experts"] = batch.routed_experts
    return {
        "batch": tensors,
        "non_tensor_batch": {
            "uid": np.asarray(batch.group_ids, dtype=object),
            "multi_modal_inputs": np.asarray([{} for _ in batch.group_ids], dtype=object),
            **components,
        },
        "meta_info": {
            "job_ids": list(batch.job_ids),
            "chain_kinds": list(batch.chain_kinds),
            "episode_ids": list(batch.episode_ids),
            "policy_versions": batch.policy_versions,
            "rollout_logprobs": [None if i is None else i.model_dump() for i in batch.logprobs],
        },
    }
