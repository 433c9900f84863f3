"""OpenRLHF's `Experience` fields, as numpy arrays.

Checked against OpenRLHF at commit 3c3be62 (`openrlhf/trainer/ppo_utils/experience.py`,
`experience_maker.py`, `openrlhf/models/utils.py`). OpenRLHF left-pads prompts and treats
the last A columns of `sequences` as the actions; agentroll's padded batch has exactly that
layout with A = R (the longest response).

| Experience field   | shape    | from agentroll                                           |
|--------------------|----------|----------------------------------------------------------|
| sequences          | (B, P+R) | prompt (left-padded) ++ response (right-padded)          |
| attention_mask     | (B, P+R) | 1 on real tokens                                         |
| action_mask        | (B, R)   | response_mask as bool (tool output and glue: False)      |
| rollout_log_probs  | (B, R)   | the sampler's logprobs (0.0 where not an action)         |
| rewards            | (B,)     | reward (OpenRLHF puts it on the last action token)       |
| scores             | (B,)     | reward (what dynamic sampling filters on)                |
| response_length    | (B,)     | real response tokens                                     |
| total_length       | (B,)     | prompt + response tokens                                 |
| truncated          | (B,)     | the rollout ended at a length limit                      |
| index              | list     | 0..B-1: samples of one group are consecutive             |
| info               | dict     | `rollout_logprobs`: per sample, what rollout_log_probs   |
|                    |          | are (mode, temperature, top_p, top_k); with reward       |
|                    |          | components, `reward_components/<name>` -> (B,) (NaN      |
|                    |          | where absent), logged by OpenRLHF as stats               |

OpenRLHF groups rewards by `index` into rows of `n_samples_per_prompt`, so every group here
must have exactly that many samples, consecutive (a `ValueError` otherwise). So it takes the
main chain of each episode only: rows of a harness's other chains (`pad_batch(...,
chains=...)`) would change a group's size with its episodes' chain counts, and are refused.

Left out on purpose, because OpenRLHF computes them itself: `action_log_probs` (the actor's
own, recomputed), `base_action_log_probs`, `values`, `kl`, `advantages` and `returns` (from
`rewards` in `compute_advantages_and_returns`).

    exp = Experience(**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                        for k, v in to_openrlhf(batch).items()})
"""

from itertools import groupby
from typing import Any

from agentroll.trainer_clients.adapters.batch import PaddedBatch


def to_openrlhf(batch: PaddedBatch) -> dict[str, Any]:
    """The batch as `Experience` fields (table above)."""
    others = sorted(set(batch.chain_kinds) - {"main"})
    if others:
        raise ValueError(f"OpenRLHF takes one row per episode: batch without chains {others}")
    sizes = {gid: len(list(run)) for gid, run in groupby(batch.group_ids)}
    if len(sizes) != len(set(batch.group_ids)):
        raise ValueError("OpenRLHF needs the samples of each group consecutive in the batch")
    if len(set(sizes.values())) > 1:
        raise ValueError(f"OpenRLHF needs equal group sizes (n_samples_per_prompt): {sizes}")
    fields: dict[str, Any] = {
        "sequences": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "action_mask": batch.response("loss_mask").astype(bool),
        "rollout_log_probs": batch.response("old_logprobs"),
        "rewards": batch.rewards,
        "scores": batch.rewards.copy(),
        "response_length": batch.response("attention_mask").sum(axis=1),
        "total_length": batch.attention_mask.sum(axis=1),
        "truncated": batch.truncated,
        "index": list(range(len(batch.job_ids))),
        "info": {
            "rollout_logprobs": [None if i is None else i.model_dump() for i in batch.logprobs]
        },
    }
    if batch.reward_components:
        fields["info"].update(
            {f"reward_components/{k}": v for k, v in batch.reward_components.items()}
        )
    return fields
