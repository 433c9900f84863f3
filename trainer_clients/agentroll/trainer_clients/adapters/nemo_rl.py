"""NeMo RL's per-sample `message_log` rows (the replay-buffer group shape).

Each trajectory becomes one row whose `message_log` splits the token stream exactly:

| message            | token_ids                          | extra                          |
|--------------------|------------------------------------|--------------------------------|
| role "user"        | prompt_ids                         |                                |
| role "assistant"   | a run of response tokens, mask 1   | generation_logprobs (same len) |
| role "environment" | a run of mask-0 tokens (tool output, template glue) |               |

plus `total_reward`, `loss_multiplier` (1.0), `length` (all tokens), `idx`, `group_id`
and `policy_versions`. Concatenating the `token_ids` gives prompt_ids + response_ids; NeMo
RL's token mask (assistant messages) is exactly the response_mask. `content` is left empty:
the token ids are the data (the readable view is `Trajectory.messages`). Convert arrays
with `torch.from_numpy` before handing rows to NeMo RL's `BatchedDataDict`.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentroll.server.schema import Trajectory
from agentroll.trainer_clients.adapters.batch import trainable
from agentroll.trainer_clients.groups import Group


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, value) of each run of equal mask values."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((start, i, mask[start]))
            start = i
    return runs


def message_log(trajectory: Trajectory) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = [
        {"role": "user", "content": "", "token_ids": np.asarray(trajectory.prompt_ids, np.int64)}
    ]
    ids, logprobs = trajectory.response_ids, trajectory.response_logprobs
    for start, end, sampled in _runs(trajectory.response_mask):
        message: dict[str, Any] = {
            "role": "assistant" if sampled else "environment",
            "content": "",
            "token_ids": np.asarray(ids[start:end], np.int64),
        }
        if sampled:
            message["generation_logprobs"] = np.asarray(logprobs[start:end], np.float32)
        log.append(message)
    return log


def to_nemo_rl(items: Sequence[Trajectory | Group]) -> list[dict[str, Any]]:
    rows = []
    for idx, t in enumerate(trainable(items)):
        if t.reward is None:
            raise ValueError(f"{t.job_id}: outcome {t.outcome.value} has no reward to train on")
        rows.append(
            {
                "message_log": message_log(t),
                "total_reward": float(t.reward),
                "loss_multiplier": 1.0,
                "length": len(t.prompt_ids) + len(t.response_ids),
                "idx": idx,
                "group_id": t.group_id or t.job_id,
                "policy_versions": list(t.policy_versions),
            }
        )
    return rows
