"""OpenRLHF's `Experience` fields, as numpy arrays.

OpenRLHF left-pads prompts and treats the last A columns of `sequences` as the actions;
agentroll's padded batch has exactly that layout with A = R (the longest response).

| Experience field   | shape    | from agentroll                                       |
|--------------------|----------|------------------------------------------------------|
| sequences          | (B, P+R) | prompt (left-padded) ++ response (right-padded)      |
| attention_mask     | (B, P+R) | 1 on real tokens                                     |
| action_mask        | (B, R)   | response_mask as bool (tool output and glue: False)  |
| action_log_probs   | (B, R)   | response_logprobs (0.0 where not an action)          |
| advantages         | (B, R)   | GRPO advantage on every action token (group_norm)    |
| returns            | (B, R)   | the same (gamma = 1, reward at the end of the turn)  |
| info["reward"]     | (B,)     | reward                                               |
| info["response_length"], info["total_length"] | (B,) | response / total real tokens |

    exp = Experience(**{k: torch.from_numpy(v) for k, v in d.items() if k != "info"},
                     info={k: torch.from_numpy(v) for k, v in d["info"].items()}, ...)
"""

from typing import Any

from agentroll.trainer_clients.adapters.batch import PaddedBatch


def to_openrlhf(batch: PaddedBatch) -> dict[str, Any]:
    advantages = batch.token_advantages[:, batch.prompt_len :]
    return {
        "sequences": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "action_mask": batch.response("loss_mask").astype(bool),
        "action_log_probs": batch.response("old_logprobs"),
        "advantages": advantages,
        "returns": advantages.copy(),
        "info": {
            "reward": batch.rewards,
            "response_length": batch.response("attention_mask").sum(axis=1),
            "total_length": batch.attention_mask.sum(axis=1),
        },
    }
