"""NeMo RL's per-sample `message_log` rows (its `DatumSpec`, after a rollout).

Checked against NeMo RL at commit 7ea279a (`nemo_rl/algorithms/grpo.py`,
`nemo_rl/algorithms/advantage_estimator.py`, `nemo_rl/algorithms/utils.py`,
`nemo_rl/data/interfaces.py`). Each trajectory becomes one row whose `message_log` splits
the token stream exactly:

| message            | token_ids                          | extra                          |
|--------------------|------------------------------------|--------------------------------|
| role "user"        | prompt_ids                         |                                |
| role "assistant"   | a run of response tokens, mask 1   | generation_logprobs (same len) |
| role "environment" | a run of mask-0 tokens (tool output, template glue) |               |

| row key         | from agentroll                                                        |
|-----------------|-----------------------------------------------------------------------|
| length          | len(prompt_ids): NeMo RL reads it as the prompt's length to find the  |
|                 | prompt messages it groups samples by for GRPO's baseline              |
| total_reward    | reward                                                                |
| loss_multiplier | 1.0                                                                   |
| truncated       | the rollout ended at a length limit (its `overlong_filtering` reads it) |
| idx             | row number                                                            |
| extra_env_info  | job_id, group_id, policy_versions, `logprobs` (what generation_logprobs |
|                 | are: mode, temperature, top_p, top_k), reward_components when the     |
|                 | handler reported some and, for an MoE engine, `routed_experts`        |
|                 | ((tokens - 1, layers, top_k) int16, aligned with the concatenated     |
|                 | token_ids); NeMo RL does not read them                                |

NeMo RL groups samples by their *prompt tokens*, not by an id: the samples of a group must
share their prompt, and two groups in one batch must not (it would pool their baselines,
even for different tasks behind the same prompt text). Both are refused (`ValueError`).
With `chains=` (`agentroll.trainer_clients.samples`), a harness's other token chains become
rows too, after their episode's, with its reward; their `extra_env_info` adds their
`chain_kind` and `episode_id`. NeMo RL baselines a chain's row against the rows that share
its prompt, which for a chain are the same-prompt chains of its group's other samples (e.g.
each sample's title call), not its episode's group; rows of different groups sharing a
prompt are refused as above.

Concatenating the `token_ids` gives prompt_ids + response_ids; NeMo RL's token loss mask
(assistant messages that carry `generation_logprobs`) is exactly the response_mask. `content`
is left empty: the token ids are the data. Convert arrays with `torch.from_numpy` before
handing rows to NeMo RL's `BatchedDataDict`. Groups that cannot be trained on are left out
whole, as in `pad_batch`; multi-agent episodes go through `policy_trajectories` first.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentroll.server.schema import Trajectory
from agentroll.trainer_clients.adapters.batch import (
    routing_array,
    single_agent,
    truncated,
    usable,
)
from agentroll.trainer_clients.groups import Group
from agentroll.trainer_clients.samples import MAIN_ONLY, ChainSelection, kind_samples


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
    """The trajectory as NeMo RL messages (table above)."""
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


def _check_prompts(rows: list[tuple[str, Trajectory]]) -> None:
    """NeMo RL's groups (by prompt tokens) must be exactly agentroll's (by group id): the
    main rows of a group share one prompt, and no two groups share a prompt."""
    group_of_prompt: dict[tuple[int, ...], str] = {}
    prompt_of_group: dict[str, tuple[int, ...]] = {}
    for kind, t in rows:
        gid, prompt = t.group_id or t.job_id, tuple(t.prompt_ids)
        if kind == "main" and prompt_of_group.setdefault(gid, prompt) != prompt:
            raise ValueError(f"group {gid}: its samples' prompts differ; NeMo RL would split it")
        if group_of_prompt.setdefault(prompt, gid) != gid:
            other = group_of_prompt[prompt]
            raise ValueError(
                f"groups {other} and {gid} share one prompt; NeMo RL would pool their baselines"
            )


def _env_info(t: Trajectory, kind: str, episode_id: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "job_id": t.job_id,
        "group_id": t.group_id or t.job_id,
        "policy_versions": list(t.policy_versions),
        "logprobs": None if t.logprobs is None else t.logprobs.model_dump(),
    }
    if kind != "main":  # a harness chain beside its episode's main one
        info.update(chain_kind=kind, episode_id=episode_id)
    if t.reward_components:
        info["reward_components"] = dict(t.reward_components)
    if t.routed_experts is not None:
        info["routed_experts"] = routing_array(t.routed_experts)
    return info


def to_nemo_rl(
    items: Sequence[Trajectory | Group], *, chains: ChainSelection = MAIN_ONLY
) -> list[dict[str, Any]]:
    """One NeMo RL row per trainable sample of the chosen chain kinds (tables above)."""
    rows = [
        (kind, sample, episode.job_id)
        for episode in single_agent(usable(items)[0])
        for kind, sample in kind_samples(episode, chains)
    ]
    _check_prompts([(kind, t) for kind, t, _ in rows])
    return [
        {
            "message_log": message_log(t),
            "length": len(t.prompt_ids),
            "total_reward": float(t.reward or 0.0),
            "loss_multiplier": 1.0,
            "truncated": truncated(t),
            "idx": idx,
            "extra_env_info": _env_info(t, kind, episode_id),
        }
        for idx, (kind, t, episode_id) in enumerate(rows)
    ]
