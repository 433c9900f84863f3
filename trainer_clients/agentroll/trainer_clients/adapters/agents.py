"""Multi-agent episodes -> one batch per policy, of the agents that are trained.

A multi-agent trajectory carries one `AgentTrace` per agent. Each *trainable* trace becomes a
single-agent `Trajectory` view of its own (its token fields; its own reward, or the episode's
when the handler gave none), so every adapter here applies to it unchanged. Frozen agents'
traces, and agents that never spoke, are left out. A single-agent trajectory is its own view,
under the `default` policy.

GRPO statistics are per task *and* agent: a view's `group_id` is `<episode group>/<agent>`, so
the solvers of one task's group are normalised against each other, and the critics of that
group apart from them, even where both agents sample from the same policy. Its `job_id` is
`<episode job>/<agent>`.

    batches = pad_policy_batches(groups)          # {"solver": PaddedBatch, ...}
    verl_data = to_verl(batches["solver"])
"""

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agentroll.server.schema import DEFAULT_POLICY, AgentTrace, Trajectory
from agentroll.trainer_clients.adapters.batch import PaddedBatch, pad_batch, usable
from agentroll.trainer_clients.groups import Group

# Facts about one token session: the episode's (its own `ctx.llm`) are not the agent's.
_SESSION_KEYS = ("llm_retries", "mixed_version_segments")


def agent_view(episode: Trajectory, trace: AgentTrace) -> Trajectory:
    """One agent's trace as a single-agent trajectory of its episode (the episode's metadata
    with the agent's own session facts)."""
    shared = {k: v for k, v in episode.metadata.items() if k not in _SESSION_KEYS}
    return episode.model_copy(
        update={
            "job_id": f"{episode.job_id}/{trace.name}",
            "group_id": f"{episode.group_id or episode.job_id}/{trace.name}",
            "prompt_ids": trace.prompt_ids,
            "response_ids": trace.response_ids,
            "response_mask": trace.response_mask,
            "response_logprobs": trace.response_logprobs,
            "segments": trace.segments,
            "policy_versions": trace.policy_versions,
            "logprobs": trace.logprobs,
            "routed_experts": trace.routed_experts,
            "num_turns": trace.num_turns,
            "messages": trace.messages,
            "tools": trace.tools,
            "reward": episode.reward if trace.reward is None else trace.reward,
            "metadata": {**shared, **trace.metadata},
            "agents": None,
        }
    )


def policy_trajectories(items: Sequence[Trajectory | Group]) -> dict[str, list[Trajectory]]:
    """The trainable agents' views of valid groups (or trajectories), by policy (groups that
    cannot be trained on are left out whole, as in `pad_batch`)."""
    by_policy: dict[str, list[Trajectory]] = defaultdict(list)
    for episode in usable(items)[0]:
        if episode.agents is None:
            by_policy[DEFAULT_POLICY].append(episode)
            continue
        if episode.prompt_ids or episode.response_ids:
            # Sampled through the job's own session, not an agent's: no policy to train it.
            raise ValueError(
                f"{episode.job_id}: a multi-agent episode with tokens outside its agents' traces"
            )
        for trace in episode.agents:
            if trace.trainable and trace.prompt_ids:
                by_policy[trace.policy].append(agent_view(episode, trace))
    return dict(by_policy)


def pad_policy_batches(
    items: Sequence[Trajectory | Group], **pad_options: Any
) -> dict[str, PaddedBatch]:
    """One `PaddedBatch` per policy with anything to train (`pad_options`: `pad_batch`'s)."""
    return {
        policy: pad_batch(views, **pad_options)
        for policy, views in policy_trajectories(items).items()
    }
