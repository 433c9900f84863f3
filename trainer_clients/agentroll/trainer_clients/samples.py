"""Every trainable sample of an episode: its main token stream and, for a harness run that
rebuilt several token chains, the chains the trainer chose by kind.

A harness run's trajectory holds its main chain in the token fields and every other chain in
`chains`, each with a kind: `continuation` (the agent's loop across a break that rewrote its
history, e.g. a context compaction), `side` (a call beside the loop: a title, a router
call), `parallel` (made while another call was sampled). `samples(t, chains)` turns the
chosen ones into single-chain `Trajectory` views, so every adapter batches them unchanged:

    samples(t)                                   # [t]: the main chain only (the default)
    samples(t, {"main", "continuation"})         # the whole agent loop
    samples(t, "all")                            # every chain

A view keeps its episode's reward and outcome, and its group (`group_id`: the episode's, or
for an episode without one its job id); its `job_id` is
`<episode job>/chain<index>` (`index`: the chain's position in `metadata.llm_proxy.chains`)
and `metadata["chain"]` says its kind and episode. Side and parallel chains include calls
the policy's own commands made through the rollout's proxy (it can reach it like the
harness does): their prompts are whatever it wrote, so train on them knowingly.
"""

from collections.abc import Collection
from typing import Literal, get_args

from agentroll.server.schema import ChainKind, ChainTrace, Trajectory

ChainSelection = Literal["all"] | Collection[ChainKind]
CHAIN_KINDS: frozenset[ChainKind] = frozenset(get_args(ChainKind))
MAIN_ONLY: frozenset[ChainKind] = frozenset({"main"})


def chosen_kinds(chains: ChainSelection) -> frozenset[str]:
    """The chain kinds `chains` names; an unknown kind (or a bare string) is a `ValueError`."""
    if chains == "all":
        return CHAIN_KINDS
    if isinstance(chains, str):
        raise ValueError(f"chains must be 'all' or a set of kinds (got {chains!r})")
    unknown = set(chains) - CHAIN_KINDS
    if unknown:
        raise ValueError(f"unknown chain kinds {sorted(unknown)}; known: {sorted(CHAIN_KINDS)}")
    return frozenset(chains)


def chain_view(episode: Trajectory, chain: ChainTrace) -> Trajectory:
    """One chain of `episode` as a single-chain trajectory of its own (module docstring)."""
    return episode.model_copy(
        update={
            "job_id": f"{episode.job_id}/chain{chain.index}",
            "group_id": episode.group_id or episode.job_id,
            "prompt_ids": chain.prompt_ids,
            "response_ids": chain.response_ids,
            "response_mask": chain.response_mask,
            "response_logprobs": chain.response_logprobs,
            "segments": chain.segments,
            "policy_versions": chain.policy_versions,
            "logprobs": chain.logprobs,
            "routed_experts": None,
            "num_turns": chain.num_turns,
            "finish_reason": chain.segments[-1].finish_reason if chain.segments else None,
            # The readable view is the main chain's conversation: not this chain's.
            "messages": [],
            "metadata": {
                **episode.metadata,
                "chain": {"index": chain.index, "kind": chain.kind, "episode": episode.job_id},
            },
            "chains": None,
        }
    )


def kind_samples(
    episode: Trajectory, chains: ChainSelection = MAIN_ONLY
) -> list[tuple[ChainKind, Trajectory]]:
    """The episode's samples of the chosen chain kinds, each with its kind: the episode
    itself for `main`, then its other chains in the order they began."""
    kinds = chosen_kinds(chains)
    out: list[tuple[ChainKind, Trajectory]] = [("main", episode)] if "main" in kinds else []
    return out + [(c.kind, chain_view(episode, c)) for c in episode.chains or [] if c.kind in kinds]


def samples(episode: Trajectory, chains: ChainSelection = MAIN_ONLY) -> list[Trajectory]:
    """`kind_samples` without the kinds."""
    return [sample for _, sample in kind_samples(episode, chains)]
