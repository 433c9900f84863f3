"""Token chains: how a harness's calls become exact token-in/token-out trajectories.

A harness sends whole conversations as text messages; the model sampled token ids. Each
chat call is first tokenized by the backend (`/tokenize`, messages + tools): its canonical
prompt `T`. A call *extends* a chain when `T` starts with the chain's expectation: the
canonical tokens of the chain's last conversation plus the reply the proxy returned, turn
closed. Only server-side tokenizations are compared, never decoded text. When it extends,
the prompt actually sent to the backend is the chain's own tokens (its first prompt, the
sampled ids verbatim, the observations so far) + the turn-closing tokens the model did not
sample itself + `T[len(expectation):]` (the new messages and the next generation prompt,
mask 0). So the model always continues from exactly the tokens it produced, and every chain
satisfies docs/design.md, invariant 3 on its own.

A call that extends no chain starts a new one from its canonical prompt (history rewritten,
truncated, summarised, a reply edited, or calls in parallel). The chain the previous call
belonged to then records why it broke. `/v1/completions` calls carry token ids and extend a
chain when their prompt literally starts with the chain's tokens.

The main chain — the one mapped onto the trajectory's token fields — is the one with the
most sampled tokens (ties: the earliest). A harness that runs one agent loop has one chain;
when it has several, the longest is the loop that did the work, and a short side call
(a title, a summary) never displaces it. Every other chain gets a kind (`ChainKind`), read
from how it began and whether the chain in use before it was ever taken up again:

- `continuation`: the agent's loop on the other side of a break from the main chain, with
  the same tools and system prompt. The chain in use when it began was never extended
  again (the loop rewrote its history: compacted, truncated, summarised, edited a reply),
  or the main chain began that way from it. A side call made before the loop's first call
  with the loop's own tools and system prompt looks the same and reads as one too.
- `side`: a detour; the chain in use when it began was extended again afterwards (a title,
  a router or memory call, a sub-agent run in turn).
- `parallel`: it began while another call was being sampled (parallel calls, sub-agents).

`loop()` is the main chain with its continuations, in order: the prefix counters count
its calls only, so side calls never read as breaks of the agent's loop.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from agentroll.server.schema import ChainKind, LogprobsMode, Segment
from agentroll.server.schema.messages import ChatMessage, ToolSpec

BreakReason = Literal[
    "history_rewritten", "reply_rewritten", "no_new_messages", "concurrent_call",
    "reply_not_rendered", "left_for_another_chain",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a continuation of a chain starts with, in server-side (canonical) tokens."""

    ids: list[int]
    """The tip call's conversation + the returned reply, rendered with the turn closed."""
    closing: list[int]
    """The tokens that close an assistant turn (e.g. `<|im_end|>\\n`)."""
    prompt_len: int
    """Length of the tip call's canonical prompt (where the reply starts in `ids`)."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One generation call's result inside a proxy call (a pause may split a call)."""

    token_ids: list[int]
    logprobs: list[float]
    backend_id: str
    policy_version: int
    finish_reason: str
    logprobs_mode: LogprobsMode | None = None


@dataclass(slots=True)
class Break:
    by_call: int
    reason: BreakReason
    at_token: int | None = None


@dataclass(eq=False)
class Chain:
    index: int
    """Stable id within the rollout (the report numbers chains by position)."""
    prompt_ids: list[int]
    tools: list[ToolSpec]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    busy: bool = False
    expectation: "asyncio.Task[Expectation | None] | None" = None
    broken: Break | None = None
    """Why the call after its last one did not extend it (cleared if it is extended again)."""
    last_sampled: list[int] = field(default_factory=list)
    first_call: int = 0
    parent: "Chain | None" = None
    """The chain the previous call was on when this one began (None for the first)."""
    concurrent: bool = False
    """It began while another call was being sampled."""

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def sampled_tokens(self) -> int:
        return sum(self.response_mask)

    def summary(self, position: int, kind: ChainKind) -> dict[str, Any]:
        return {
            "index": position,
            "kind": kind,
            "calls": list(self.calls),
            "prompt_tokens": len(self.prompt_ids),
            "response_tokens": len(self.response_ids),
            "sampled_tokens": self.sampled_tokens,
            "broken": None
            if self.broken is None
            else {
                "by_call": self.broken.by_call,
                "reason": self.broken.reason,
                "at_token": self.broken.at_token,
            },
        }

    def tokens_view(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "response_logprobs": self.response_logprobs,
            "segments": [s.model_dump() for s in self.segments],
        }


@dataclass(slots=True)
class Placement:
    """Where one call goes, decided before it is sampled; committed only if it succeeds."""

    chain: Chain
    new: bool
    observation: list[int]
    """Tokens to append (mask 0) before sampling: turn-closing glue + new messages."""
    prompt: list[int]
    """Exactly what is sent to the backend."""
    undo: tuple["Chain | None", "Chain | None", "Break | None"] = (None, None, None)
    """(previous last chain, chain whose break this call recorded, the break it cleared)."""


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _closing_overlap(sampled: list[int], closing: list[int]) -> int:
    """How many leading tokens of `closing` the model already sampled at its end."""
    for k in range(min(len(closing), len(sampled)), 0, -1):
        if sampled[-k:] == closing[:k]:
            return k
    return 0


def _system_prompt(chain: Chain) -> ChatMessage | None:
    first = chain.messages[0] if chain.messages else None
    return first if first is not None and first.get("role") == "system" else None


def _same_agent(a: Chain, b: Chain) -> bool:
    return a.tools == b.tools and _system_prompt(a) == _system_prompt(b)


class ChainBook:
    """Every chain of one rollout, and the counts the trajectory reports."""

    def __init__(self) -> None:
        self.chains: list[Chain] = []
        self._last: Chain | None = None
        self._ids = 0

    async def expectations(self, timeout_s: float) -> dict[int, Expectation | None]:
        """The settled expectation of every idle chain (rendering runs in the background)."""
        out: dict[int, Expectation | None] = {}
        for chain in self.chains:
            task = chain.expectation
            if chain.busy or task is None:
                continue
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), timeout_s)
                except (TimeoutError, Exception):
                    out[chain.index] = None
                    continue
            out[chain.index] = None if task.cancelled() or task.exception() else task.result()
        return out

    def _candidates(self) -> list[Chain]:
        """Idle chains, the most recently used first."""
        idle = [c for c in self.chains if not c.busy and c.calls]
        return sorted(idle, key=lambda c: c.calls[-1], reverse=True)

    def place(
        self,
        call: int,
        canonical: list[int],
        tools: list[ToolSpec],
        expectations: dict[int, Expectation | None] | None,
    ) -> Placement:
        """Choose the chain `call` extends (`expectations` is None for token-id prompts)."""
        for chain in self._candidates():
            literal = chain.tokens
            if len(canonical) > len(literal) and canonical[: len(literal)] == literal:
                return self._extend(call, chain, canonical[len(literal) :])
            exp = (expectations or {}).get(chain.index)
            n = len(exp.ids) if exp is not None else 0
            if exp is not None and len(canonical) > n and canonical[:n] == exp.ids:
                glue = exp.closing[_closing_overlap(chain.last_sampled, exp.closing) :]
                return self._extend(call, chain, glue + canonical[n:])
        prev, marked = self._last, self._note_break(call, canonical, expectations)
        concurrent = any(c.busy for c in self.chains)
        self._ids += 1
        chain = Chain(self._ids, list(canonical), list(tools), busy=True, first_call=call)
        chain.parent, chain.concurrent = prev, concurrent
        self.chains.append(chain)
        self._last = chain
        return Placement(chain, True, [], list(canonical), (prev, marked, None))

    def _extend(self, call: int, chain: Chain, observation: list[int]) -> Placement:
        prev, marked = self._last, None
        if prev is not None and prev is not chain and prev.broken is None:
            prev.broken, marked = Break(call, "left_for_another_chain"), prev
        # Taken up again: whatever left it was a detour, not where it ended.
        cleared, chain.broken = chain.broken, None
        chain.busy = True
        self._last = chain
        undo = (prev, marked, cleared)
        return Placement(chain, False, observation, chain.tokens + observation, undo)

    def _note_break(
        self, call: int, canonical: list[int], expectations: dict[int, Expectation | None] | None
    ) -> "Chain | None":
        """Record why the previous call's chain is not extended; returns it if it was marked."""
        last = self._last
        if last is None or last.broken is not None:
            return None
        exp = (expectations or {}).get(last.index)
        if last.busy:
            last.broken = Break(call, "concurrent_call")
        elif expectations is not None and exp is None:
            last.broken = Break(call, "reply_not_rendered")
        else:
            ids = exp.ids if exp is not None else last.tokens
            prompt_len = exp.prompt_len if exp is not None else len(ids) - len(last.last_sampled)
            at = common_prefix(canonical, ids)
            if at < prompt_len:
                last.broken = Break(call, "history_rewritten", at)
            elif at < len(ids):
                last.broken = Break(call, "reply_rewritten", at)
            else:
                last.broken = Break(call, "no_new_messages", at)
        return last

    def commit(
        self, call: int, placement: Placement, pieces: list[Piece], messages: list[ChatMessage]
    ) -> None:
        """Record a sampled call: observation (mask 0), then each piece's ids verbatim (mask 1)."""
        chain = placement.chain
        chain.response_ids += placement.observation
        chain.response_mask += [0] * len(placement.observation)
        chain.response_logprobs += [0.0] * len(placement.observation)
        sampled: list[int] = []
        for piece in pieces:
            start = len(chain.response_ids)
            chain.response_ids += piece.token_ids
            chain.response_mask += [1] * len(piece.token_ids)
            chain.response_logprobs += piece.logprobs
            sampled += piece.token_ids
            chain.segments.append(
                Segment(
                    start=start,
                    end=len(chain.response_ids),
                    backend_id=piece.backend_id,
                    policy_version=piece.policy_version,
                    finish_reason=piece.finish_reason,
                    logprobs_mode=piece.logprobs_mode,
                )
            )
        chain.last_sampled = sampled
        chain.messages = messages
        chain.calls.append(call)
        chain.busy = False

    def abandon(self, placement: Placement) -> None:
        """The call failed before anything was sampled: the chain is as it was."""
        placement.chain.busy = False
        prev, marked, cleared = placement.undo
        if marked is not None:
            marked.broken = None
        if cleared is not None:
            placement.chain.broken = cleared
        if self._last is placement.chain:
            self._last = prev
        if placement.new and not placement.chain.calls:
            self.chains.remove(placement.chain)

    def main(self) -> Chain | None:
        """The chain with the most sampled tokens (ties: the earliest)."""
        with_calls = [c for c in self.chains if c.calls]
        if not with_calls:
            return None
        return max(with_calls, key=lambda c: (c.sampled_tokens, -c.index))

    def _took_over(self, chain: Chain) -> bool:
        """`chain` went on where its parent left off for good: the same agent (tools and
        system prompt: a title or router call has its own), the parent never extended again,
        and no other call in flight (a continuation, not a detour)."""
        parent = chain.parent
        if parent is None or chain.concurrent or not _same_agent(parent, chain):
            return False
        return all(call < chain.first_call for call in parent.calls)

    def loop(self) -> list[Chain]:
        """The agent's loop: the main chain with the chains it continues and that continue
        it across breaks, in order (empty before any call)."""
        main = self.main()
        if main is None:
            return []
        line = [main]
        while self._took_over(line[0]):
            assert line[0].parent is not None
            line.insert(0, line[0].parent)
        while True:
            tail = line[-1]
            after = [c for c in self.chains if c.parent is tail and self._took_over(c)]
            if not after:
                return line
            line.append(after[0])

    def kinds(self) -> dict[int, ChainKind]:
        """Each chain's kind, by `Chain.index` (module docstring)."""
        main, loop = self.main(), self.loop()
        out: dict[int, ChainKind] = {}
        for chain in self.chains:
            if chain is main:
                out[chain.index] = "main"
            elif chain in loop:
                out[chain.index] = "continuation"
            else:
                out[chain.index] = "parallel" if chain.concurrent else "side"
        return out

    def loop_counts(self) -> tuple[int, int]:
        """(calls that extended a chain of the loop, breaks within the loop)."""
        loop = self.loop()
        return sum(len(c.calls) - 1 for c in loop if c.calls), max(len(loop) - 1, 0)

    def close(self) -> None:
        for chain in self.chains:
            if chain.expectation is not None:
                chain.expectation.cancel()
