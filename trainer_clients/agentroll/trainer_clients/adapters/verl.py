"""verl's `DataProto` fields, as numpy arrays.

| verl key                     | shape  | from agentroll                                        |
|------------------------------|--------|-------------------------------------------------------|
| batch.prompts                | (B, P) | prompt_ids, left-padded                               |
| batch.responses              | (B, R) | response_ids, right-padded                            |
| batch.input_ids              | (B, P+R) | prompts ++ responses                                |
| batch.attention_mask         | (B, P+R) | 1 on real tokens                                    |
| batch.position_ids           | (B, P+R) | cumsum(attention_mask) - 1                          |
| batch.response_mask          | (B, R) | response_mask (0 on tool output, glue and padding)    |
| batch.old_log_probs          | (B, R) | response_logprobs (the sampler's; verl may recompute) |
| batch.rollout_log_probs      | (B, R) | the same sampler logprobs (for importance correction) |
| batch.token_level_scores     | (B, R) | reward on the last response token, 0 elsewhere        |
| batch.advantages             | (B, R) | GRPO advantage on every loss-masked token             |
| non_tensor_batch.uid         | (B,)   | group_id (verl's GRPO groups samples by uid)          |

    from verl import DataProto
    d = to_verl(pad_batch(groups))
    proto = DataProto.from_dict(
        tensors={k: torch.from_numpy(v) for k, v in d["batch"].items()},
        non_tensors=d["non_tensor_batch"], meta_info=d["meta_info"])
"""

from typing import Any

import numpy as np

from agentroll.trainer_clients.adapters.batch import PaddedBatch


def to_verl(batch: PaddedBatch) -> dict[str, Any]:
    attention = batch.response("attention_mask")
    lengths = attention.sum(axis=1)
    scores = np.zeros(attention.shape, dtype=np.float32)
    has_tokens = lengths > 0
    rows = np.nonzero(has_tokens)[0]
    scores[rows, lengths[has_tokens] - 1] = batch.rewards[has_tokens]
    logprobs = batch.response("old_logprobs")
    return {
        "batch": {
            "prompts": batch.input_ids[:, : batch.prompt_len],
            "responses": batch.response("input_ids"),
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "position_ids": batch.position_ids,
            "response_mask": batch.response("loss_mask"),
            "old_log_probs": logprobs,
            "rollout_log_probs": logprobs.copy(),
            "token_level_scores": scores,
            "advantages": batch.token_advantages[:, batch.prompt_len :],
        },
        "non_tensor_batch": {"uid": np.asarray(batch.group_ids, dtype=object)},
        "meta_info": {"job_ids": list(batch.job_ids), "policy_versions": batch.policy_versions},
    }
