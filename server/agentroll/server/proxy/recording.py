"""What a rollout's proxy contributes to its trajectory.

`trajectory_view` maps the main chain onto the fields `Rollout.trajectory` reads from an LLM
session (prompt/response ids, mask, logprobs, segments, messages, tools, timing counters),
so the token fields keep every trajectory invariant (docs/design.md, invariants 1-4) exactly
as for a handler-driven rollout.
`chain_traces` is the trajectory's `chains`: every other chain as a trainable sample of its
own, with its kind.
`report` is `metadata["llm_proxy"]`: the counts (over the agent's loop: the main chain and
its continuations), the kind of each chain and the reason it broke (the main one first; the
others also with their token fields, as they were before `chains` held them), and
every call with its API and whether it was a side call (one outside the agent's loop: a title,
a router or a background memory call).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentroll.handlers import ProxyStop
from agentroll.server.proxy.chains import ChainBook
from agentroll.server.recorded import RecordedTokens, logprobs_info
from agentroll.server.schema import ChainTrace, RoutedExperts, Segment
from agentroll.server.schema.messages import ChatMessage, ToolSpec


class ProxyRecord(Protocol):
    """What a rollout's proxy recorded (`RolloutProxy` is one)."""

    @property
    def book(self) -> ChainBook: ...
    @property
    def calls(self) -> list[dict[str, Any]]: ...
    @property
    def sampled_tokens(self) -> int: ...
    @property
    def context_overflows(self) -> int: ...
    @property
    def mixed_version_segments(self) -> int: ...
    @property
    def refused(self) -> Mapping[str, int]: ...
    @property
    def stopped(self) -> ProxyStop | None: ...


@dataclass(frozen=True)
class ProxyTrajectory:
    """The main chain as `RecordedTokens`, with the session's timing counters."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    segments: list[Segment]
    messages: list[ChatMessage]
    tools: list[ToolSpec]
    num_turns: int
    llm_s: float
    llm_calls: int
    retries: list[Mapping[str, str]] = field(default_factory=list)
    routed_experts: RoutedExperts | None = None
    """Not recorded through the proxy: a harness's calls are not one token chain per call."""


def trajectory_view(proxy: ProxyRecord, session: RecordedTokens) -> ProxyTrajectory | None:
    """The main chain (None before any call); timing counters and retries come from the
    session all of the proxy's calls went through."""
    main = proxy.book.main()
    if main is None:
        return None
    return ProxyTrajectory(
        prompt_ids=list(main.prompt_ids),
        response_ids=list(main.response_ids),
        response_mask=list(main.response_mask),
        response_logprobs=list(main.response_logprobs),
        segments=list(main.segments),
        messages=list(main.messages),
        tools=list(main.tools),
        num_turns=len(main.calls),
        llm_s=session.llm_s,
        llm_calls=session.llm_calls,
        retries=list(session.retries),
    )


def chain_traces(proxy: ProxyRecord, sampling: Mapping[str, Any]) -> list[ChainTrace]:
    """Every chain but the main one, in the order they began (`sampling`: the job's, which
    every call was sent)."""
    book = proxy.book
    main, kinds = book.main(), book.kinds()
    return [
        ChainTrace(
            index=position,
            kind=kinds[chain.index],
            calls=list(chain.calls),
            prompt_ids=list(chain.prompt_ids),
            response_ids=list(chain.response_ids),
            response_mask=list(chain.response_mask),
            response_logprobs=list(chain.response_logprobs),
            segments=list(chain.segments),
            policy_versions=sorted({s.policy_version for s in chain.segments}),
            logprobs=logprobs_info(chain.segments, sampling),
            num_turns=len(chain.calls),
        )
        for position, chain in enumerate(book.chains)
        if chain is not main and chain.calls
    ]


def report(proxy: ProxyRecord) -> dict[str, Any]:
    book = proxy.book
    main, kinds = book.main(), book.kinds()
    position = {id(c): i for i, c in enumerate(book.chains)}
    ordered = ([main] if main is not None else []) + [c for c in book.chains if c is not main]
    chains = []
    for chain in ordered:
        entry = chain.summary(position[id(chain)], kinds[chain.index])
        entry["main"] = chain is main
        if chain is not main:  # as before `Trajectory.chains`, for readers of these keys
            entry.update(chain.tokens_view())
        chains.append(entry)
    extended, broken = book.loop_counts()
    loop = {position[id(c)] for c in book.loop()}
    chain_of = {c.index: position[id(c)] for c in book.chains}
    calls = []
    for call in proxy.calls:
        entry = dict(call)
        if "chain_id" in entry:
            entry["chain"] = chain_of.get(entry.pop("chain_id"))
        # A call outside the agent's loop (a title, a router or a background call) is served
        # and kept, but it is not the agent's own conversation.
        entry["side"] = entry.get("chain") not in loop
        calls.append(entry)
    stop = proxy.stopped
    return {
        "calls": len(proxy.calls),
        "side_calls": sum(1 for c in calls if c["side"]),
        "num_chains": len(book.chains),
        "main_chain": position[id(main)] if main is not None else None,
        "prefix_extended": extended,
        "prefix_broken": broken,
        "sampled_tokens": proxy.sampled_tokens,
        "context_overflows": proxy.context_overflows,
        "mixed_version_segments": proxy.mixed_version_segments,
        "refused": dict(proxy.refused),
        "stopped": None
        if stop is None
        else {"kind": stop.kind, "cause": stop.cause, "message": stop.message},
        "chains": chains,
        "call_log": calls,
    }
