"""The trainer-neutral padded batch and GRPO advantages.

Layout (B samples, P = longest prompt, R = longest response):

    column:          0 ........ P-1 | P ............. P+R-1
    input_ids        pad.. prompt   | response ..... pad
    attention_mask   0..0 1....1    | 1 ........ 1 0..0
    loss_mask        0 ........ 0   | response_mask  0..0     (1 = sampled by the policy)
    old_logprobs     0 ........ 0   | response_logprobs 0..0  (the sampler's, per token)
    routed_experts   0..0 rows of prompt ++ response ..... 0..0  (MoE only, below)

`old_logprobs[b, t]` is the log-probability of `input_ids[b, t]` given the tokens before
it: compare it with the model's logits at column t - 1. Masked columns carry 0.0. What those
logprobs are (raw or processed, and the sampling that produced them) is in `logprobs`, one
declaration per sample: a trainer that recomputes raw logprobs must not compare them with
processed ones.

`routed_experts[b, t]` (B, P+R, layers, top_k; int16) holds the MoE experts the engine routed
`input_ids[b, t]` to, for router replay; zeros where the engine never read the token (padding,
the last token). It is None unless every sample carries routing of one shape.

What cannot be trained on is left out whole, never one sample of a group (that would skew
the group's baseline): an invalid group, and a group with a sample that carries no reward
(an `agent_error` the server sent without one). `PaddedBatch.skipped` says which and why.

Harness runs can hold several token chains (`Trajectory.chains`); `chains=` picks which
kinds become rows (`agentroll.trainer_clients.samples`; default: the main chain only, one
row per episode). Advantages are computed over episodes, one reward each, and every row of
an episode gets its episode's: a compaction's continuation or a title call did what the
episode was rewarded for, and an episode with more chains must not weigh more in its group's
baseline. Rows of one episode are consecutive; `chain_kinds` and `episode_ids` say what each
row is.
"""

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agentroll.server.schema import LogprobsInfo, Outcome, RoutedExperts, Trajectory
from agentroll.trainer_clients.groups import Group
from agentroll.trainer_clients.samples import MAIN_ONLY, ChainSelection, kind_samples

log = logging.getLogger("agentroll.trainer_clients")
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Bools = npt.NDArray[np.bool_]


def grpo_advantages(
    rewards: Sequence[float], group_ids: Sequence[str], *, scale: bool = True, eps: float = 1e-6
) -> Floats:
    """(r - mean of its group) / (sample std of its group + eps); `scale=False` skips the
    division (Dr. GRPO). A group of one, or of equal rewards, gets advantage 0."""
    values = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(values)
    ids = np.asarray(group_ids, dtype=object)
    for gid in dict.fromkeys(group_ids):
        members = ids == gid
        group = values[members]
        centred = group - group.mean()
        if scale and len(group) > 1:
            centred = centred / (group.std(ddof=1) + eps)
        out[members] = centred
    return out.astype(np.float32)


@dataclass
class PaddedBatch:
    input_ids: Ints
    attention_mask: Ints
    position_ids: Ints
    loss_mask: Ints
    old_logprobs: Floats
    rewards: Floats
    advantages: Floats
    """One per sample; `token_advantages` broadcasts it over the loss mask."""
    prompt_len: int
    response_len: int
    job_ids: list[str]
    group_ids: list[str]
    policy_versions: list[list[int]]
    truncated: Bools
    """The rollout ended at a length limit (`finish_reason: length`, e.g. context overflow)."""
    skipped: dict[str, str]
    """Groups left out, by group id: why (invalid, a sample without a reward)."""
    logprobs: list[LogprobsInfo | None]
    """Per sample: what its logprobs are (backend mode, temperature, top-p, top-k)."""
    routed_experts: Any | None = None
    """(B, P+R, layers, top_k) int16 MoE routing, aligned with `input_ids` (docstring)."""
    reward_components: dict[str, Floats] = field(default_factory=dict)
    """The handlers' named reward components, one (B,) column per name found in the batch
    (NaN for a sample whose handler did not report that name); empty when none did."""
    chain_kinds: list[str] = field(default_factory=list)
    """Per row: the kind of token chain it is (`main`, `continuation`, `side`, `parallel`)."""
    episode_ids: list[str] = field(default_factory=list)
    """Per row: the job id of its episode (a chain's row has `<job>/chain<i>` in job_ids)."""

    @property
    def token_advantages(self) -> Floats:
        return (self.advantages[:, None] * self.loss_mask).astype(np.float32)

    def response(self, name: str) -> Any:
        """The response columns of one array field (`input_ids`, `loss_mask`, ...)."""
        return getattr(self, name)[:, self.prompt_len :]


def usable(items: Sequence[Trajectory | Group]) -> tuple[list[Trajectory], dict[str, str]]:
    """The samples to train on, in the order given, and the groups left out whole (group id
    -> why). Loose trajectories are grouped by `group_id` (their job id without one)."""
    skipped: dict[str, str] = {}
    members: list[tuple[str, Trajectory]] = []
    for item in items:
        if isinstance(item, Group):
            if not item.valid:
                skipped[item.group_id] = f"invalid: {item.reason}"
            members += [(item.group_id, t) for t in item.trajectories if item.valid]
        else:
            members.append((item.group_id or item.job_id, item))
    for group_id, t in members:
        if _no_reward(t) and group_id not in skipped:
            skipped[group_id] = f"{t.job_id}: outcome {t.outcome.value} has no reward"
    if skipped:
        log.warning("left out %d group(s) that cannot be trained on: %s", len(skipped), skipped)
    return [t for group_id, t in members if group_id not in skipped], skipped


def _no_reward(t: Trajectory) -> bool:
    return t.outcome not in (Outcome.ok, Outcome.agent_error) or t.reward is None


def single_agent(trajectories: list[Trajectory]) -> list[Trajectory]:
    """`trajectories`, once none is a multi-agent episode (their tokens are in the agents'
    traces: batched as they are, they would train on nothing and still count in a baseline)."""
    multi = [t.job_id for t in trajectories if t.agents is not None]
    if multi:
        raise ValueError(
            f"multi-agent episodes {multi[:3]}: batch them per policy with pad_policy_batches "
            "(or convert the views of policy_trajectories)"
        )
    return trajectories


def pad_batch(
    items: Sequence[Trajectory | Group],
    *,
    pad_id: int = 0,
    scale_advantages: bool = True,
    max_len: int | None = None,
    chains: ChainSelection = MAIN_ONLY,
) -> PaddedBatch:
    """Pad valid groups (or trajectories) into one batch; advantages are normalised per
    `group_id` over episodes, and each row of the chosen chain kinds gets its episode's
    (module docstring). Groups that cannot be trained on are left out whole (`skipped`);
    nothing left is a `ValueError`."""
    kept, skipped = usable(items)
    episodes = single_agent(kept)
    if not episodes:
        raise ValueError(f"nothing to batch (left out: {skipped})")
    episode_advantages = grpo_advantages(
        [float(t.reward or 0.0) for t in episodes],
        [t.group_id or t.job_id for t in episodes],
        scale=scale_advantages,
    )
    rows = [
        (kind, sample, advantage, episode)
        for episode, advantage in zip(episodes, episode_advantages, strict=True)
        for kind, sample in kind_samples(episode, chains)
    ]
    if not rows:
        raise ValueError(f"no token chain of the chosen kinds ({chains!r}) in the batch")
    trajectories = [sample for _, sample, _, _ in rows]
    P = max(len(t.prompt_ids) for t in trajectories)
    R = max(len(t.response_ids) for t in trajectories)
    if max_len is not None and max_len < P + R:
        raise ValueError(f"longest prompt + response is {P + R} tokens > max_len {max_len}")
    B = len(trajectories)
    input_ids = np.full((B, P + R), pad_id, dtype=np.int64)
    attention = np.zeros((B, P + R), dtype=np.int64)
    loss = np.zeros((B, P + R), dtype=np.int64)
    logprobs = np.zeros((B, P + R), dtype=np.float32)
    for b, t in enumerate(trajectories):
        p, r = len(t.prompt_ids), len(t.response_ids)
        input_ids[b, P - p : P] = t.prompt_ids
        input_ids[b, P : P + r] = t.response_ids
        attention[b, P - p : P + r] = 1
        loss[b, P : P + r] = t.response_mask
        logprobs[b, P : P + r] = np.where(
            np.asarray(t.response_mask) == 1, t.response_logprobs, 0.0
        )
    positions = np.clip(np.cumsum(attention, axis=1) - 1, 0, None).astype(np.int64)
    rewards = [float(t.reward or 0.0) for t in trajectories]
    group_ids = [t.group_id or t.job_id for t in trajectories]
    return PaddedBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        loss_mask=loss,
        old_logprobs=logprobs,
        rewards=np.asarray(rewards, dtype=np.float32),
        advantages=np.asarray([advantage for _, _, advantage, _ in rows], dtype=np.float32),
        prompt_len=P,
        response_len=R,
        job_ids=[t.job_id for t in trajectories],
        group_ids=group_ids,
        policy_versions=[list(t.policy_versions) for t in trajectories],
        truncated=np.asarray([truncated(t) for t in trajectories], dtype=np.bool_),
        skipped=skipped,
        logprobs=[t.logprobs for t in trajectories],
        routed_experts=_routed_experts(trajectories, P, R),
        reward_components=reward_component_columns(trajectories),
        chain_kinds=[kind for kind, _, _, _ in rows],
        episode_ids=[episode.job_id for _, _, _, episode in rows],
    )


def reward_component_columns(trajectories: Sequence[Trajectory]) -> dict[str, Floats]:
    """One column per reward component name, NaN where a sample has no such component (a
    missing part is not a part worth 0)."""
    names = sorted({name for t in trajectories for name in t.reward_components or {}})
    return {
        name: np.asarray(
            [(t.reward_components or {}).get(name, np.nan) for t in trajectories],
            dtype=np.float32,
        )
        for name in names
    }


def routing_array(routed: RoutedExperts) -> Any:
    """A trajectory's routed experts as a (positions, layers, top_k) int16 array."""
    dtype = np.dtype("<u1") if routed.dtype == "uint8" else np.dtype("<u2")
    flat = np.frombuffer(base64.b64decode(routed.data), dtype=dtype)
    return flat.reshape(routed.positions, routed.num_layers, routed.top_k).astype(np.int16)


def _routed_experts(trajectories: list[Trajectory], P: int, R: int) -> Any | None:
    """Routing aligned with the padded `input_ids`, when every sample has one shape of it."""
    routed = [t.routed_experts for t in trajectories]
    shapes = {None if r is None else (r.num_layers, r.top_k) for r in routed}
    if len(shapes) != 1 or None in shapes:
        if shapes != {None}:
            log.warning("routed_experts left out: samples carry none or differ in shape")
        return None
    first = routed[0]
    assert first is not None
    layers, top_k = first.num_layers, first.top_k
    out = np.zeros((len(trajectories), P + R, layers, top_k), dtype=np.int16)
    for b, t in enumerate(trajectories):
        assert t.routed_experts is not None
        rows = routing_array(t.routed_experts)
        start = P - len(t.prompt_ids)
        out[b, start : start + len(rows)] = rows
    return out


def truncated(t: Trajectory) -> bool:
    """The rollout was cut at a length limit (context overflow, max tokens)."""
    return t.finish_reason == "length"
