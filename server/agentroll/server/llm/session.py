"""`TokenSession`: the server's implementation of the handlers' `LLMSession`.

It records a trajectory as token ids, never as text:
- the first prompt is tokenized once by the backend (`/tokenize`, messages form);
- each turn sends `prompt_ids + response_ids` as a token prompt, and appends exactly the
  ids and logprobs the backend returned (mask 1);
- new messages are tokenized as a *delta* against a fixed probe conversation, so earlier
  turns are never re-rendered (mask 0). The tokens that close the model's turn (e.g.
  `<|im_end|>\\n`) are added only where the model did not sample them itself.

Every generation attempt, a retry on another backend included, passes the pause gate, so no
request reaches a backend during a weight sync. The session is pinned to backends of one
tokenizer identity (`Backend.tokenizer_key`): ids sampled by one model are never continued
by another, and to the backends of its policy (`policy`): an agent samples only from the
weights it was declared with.

A request the policy shaped (every call of a harness's proxy; a prompt holding the policy's
replies or tool output) is contained (poison.py): its token ids are checked against the
backend's vocabulary before it is sent, and a backend that fails right after it is the only
one ever sent it. Whether the failure was the request's is decided by a control request on the
same backend (the job's sampling, nothing the caller sent): failed too, the backend is broken
(`LLMUnavailable`, `infra_error`); served, the request is sent once more to that backend, and a
second failure is the request's (`UnservableRequest`, `agent_error`). No retry can take down
the next engine.
"""

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentroll.handlers import (
    ContextLengthExceeded,
    InfraError,
    SampledTurn,
)
from agentroll.server.llm.backend_pool import Backend, BackendPool
from agentroll.server.llm.base import (
    BackendClient,
    Completion,
    TokenizeResult,
)
from agentroll.server.llm.gate import Flight, GenerationAborted, GenerationGate
from agentroll.server.llm.poison import (
    CONTROL_CONVERSATION,
    CONTROL_PROMPT,
    Shaped,
    check_token_ids,
    json_digest,
    token_digest,
)
from agentroll.server.llm.routed import RoutingLog
from agentroll.server.llm.routing import RoutedCalls
from agentroll.server.schema import DEFAULT_POLICY, RoutedExperts, Segment
from agentroll.server.schema.messages import ChatMessage, ToolSpec

if TYPE_CHECKING:
    from agentroll.server.metrics import ServerMetrics

_PROBE_REPLY = "ok"


def call_sampling(sampling: dict[str, Any], budget: int, sampled: int) -> dict[str, Any]:
    """The parameters of one generation call of a turn that has `sampled` tokens already (a
    pause split it) and room for `budget` more: it owes only the rest of `min_tokens`, and
    never more than fits (an engine refuses min_tokens > max_tokens)."""
    call = {**sampling, "max_tokens": budget}
    owed = min(int(call.pop("min_tokens", 0)) - sampled, budget)
    if owed > 0:
        call["min_tokens"] = owed
    return call


def _closing_overlap(sampled: Sequence[int], closing: Sequence[int]) -> int:
    """How many leading tokens of `closing` the model already sampled at its end."""
    for k in range(min(len(closing), len(sampled)), 0, -1):
        if list(sampled[-k:]) == list(closing[:k]):
            return k
    return 0


class TokenSession(RoutedCalls):
    def __init__(
        self,
        pool: BackendPool,
        *,
        sampling: dict[str, Any],
        tags: frozenset[str] = frozenset(),
        max_response_tokens: int,
        max_context_tokens: int | None,
        gate: GenerationGate,
        request_timeout_s: float,
        metrics: "ServerMetrics | None" = None,
        backend_wait_s: float = 0.0,
        policy: str = DEFAULT_POLICY,
    ) -> None:
        """`gate` must be `policy`'s: it pauses and stamps the versions of that policy only.
        `sampling["logprobs_mode"]`, if set, is a routing requirement, never sent to a backend."""
        sampling = dict(sampling)
        logprobs_mode = sampling.pop("logprobs_mode", None)
        super().__init__(
            pool,
            tags=tags,
            gate=gate,
            request_timeout_s=request_timeout_s,
            metrics=metrics,
            backend_wait_s=backend_wait_s,
            policy=policy,
            logprobs_mode=logprobs_mode,
        )
        self._sampling = sampling
        self._max_response_tokens = max_response_tokens
        self._max_context_tokens = max_context_tokens

        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self.segments: list[Segment] = []
        self.routing = RoutingLog()
        """MoE routed experts of the tokens read so far, where the backend returns them."""
        self._messages: list[ChatMessage] = []
        self.tools: list[ToolSpec] = []
        self.aborted_calls = 0
        """Generation calls a pause aborted before the backend answered (nothing recorded)."""
        self.mixed_version_segments = 0
        """Segments sampled across a weight update without a per-token version record."""

        self._first_messages: list[ChatMessage] = []
        self._probe_closed: list[int] | None = None
        self._closing: list[int] = []
        self._max_model_len: int | None = None
        self._awaiting_reply = False
        self._turns = 0

    # -- LLMSession protocol -------------------------------------------------------------
    @property
    def messages(self) -> Sequence[ChatMessage]:
        return self._messages

    @property
    def routed_experts(self) -> RoutedExperts | None:
        return self.routing.encoded()

    @property
    def num_turns(self) -> int:
        """Assistant turns generated (a turn split by a pause is still one turn)."""
        return self._turns

    @property
    def response_tokens(self) -> int:
        return len(self.response_ids)

    async def start(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> None:
        if self._first_messages:
            raise RuntimeError("LLM session already started")
        if not messages:
            raise ValueError("a session starts with at least one message")
        self._first_messages = [m.copy() for m in messages]
        self._messages = [m.copy() for m in messages]
        self.tools = [t.copy() for t in tools]
        # The backend this session would use now decides which tokenizer it is pinned to.
        self._tokenizer_key = (await self._choose(frozenset())).tokenizer_key
        key = json.dumps([self._tokenizer_key, self._first_messages, self.tools], sort_keys=True)
        cached = self._pool.prompts.get(key)
        if cached is None:
            result = await self._call(
                lambda c: c.tokenize_messages(
                    self._first_messages, self.tools or None, add_generation_prompt=True
                )
            )
            cached = (result.token_ids, result.max_model_len)
            self._pool.prompts.put(key, *cached)
        self.prompt_ids = list(cached[0])
        self._max_model_len = cached[1]
        self._awaiting_reply = True

    async def generate(self, *, max_tokens: int | None = None) -> SampledTurn:
        """One assistant turn. A pause may split it into several segments: the turn then
        continues from prompt + the tokens sampled so far once generation resumes."""
        if not self._awaiting_reply:
            raise RuntimeError("generate() needs start() or add_messages() first")
        wanted = max_tokens or int(self._sampling.get("max_tokens", 1024))
        turn_start = len(self.response_ids)
        texts: list[str] = []
        while True:
            sampled = len(self.response_ids) - turn_start
            budget = self._room(wanted - sampled)
            prompt = self.prompt_ids + self.response_ids
            sampling = call_sampling(self._sampling, budget, sampled)
            try:
                # The first turn's prompt is the task's; later ones hold the policy's doing.
                completion, backend, flight = await self.sample(
                    prompt,
                    sampling,
                    shaped=bool(self.response_ids),
                    routing_from=self.routing.covered,
                )
            except GenerationAborted:
                self.aborted_calls += 1
                continue  # nothing was returned: sample this part again after resume
            self._record(completion, backend, flight)
            self.routing.add(completion.routing)
            if self._metrics is not None:
                self._metrics.llm_tokens.labels(backend.id, "prompt").inc(len(prompt))
                self._metrics.llm_tokens.labels(backend.id, "completion").inc(
                    len(completion.token_ids)
                )
            texts.append(completion.text)
            sampled = len(self.response_ids) - turn_start
            if completion.finish_reason != "abort" or sampled >= wanted:
                break
        self._messages.append({"role": "assistant", "content": "".join(texts)})
        self._awaiting_reply = False
        self._turns += 1
        ids = self.response_ids[turn_start:]
        return SampledTurn(
            text="".join(texts),
            token_ids=tuple(ids),
            logprobs=tuple(self.response_logprobs[turn_start:]),
            finish_reason=completion.finish_reason,
            backend_id=backend.id,
            policy_version=self.segments[-1].policy_version if ids else flight.policy_version,
        )

    def _completion(
        self, prompt: list[int], sampling: dict[str, Any], routing_from: int | None = None
    ) -> Callable[[BackendClient], Awaitable[Completion]]:
        return lambda client: client.complete(
            prompt, sampling, timeout_s=self._timeout, routing_from=routing_from
        )

    def _record(self, completion: Completion, backend: Backend, flight: Flight) -> None:
        """Append the sampled ids (mask 1) with one segment per policy version that made them."""
        if not completion.token_ids:
            return  # e.g. aborted before the first token: nothing was sampled
        start = len(self.response_ids)
        self.response_ids.extend(completion.token_ids)
        self.response_mask.extend([1] * len(completion.token_ids))
        self.response_logprobs.extend(completion.logprobs)
        n = len(completion.token_ids)
        ranges = self._gate.stamp(flight, n, completion.weight_versions)
        if ranges is None:
            self.mixed_version_segments += 1  # cannot tell which tokens came from which
            ranges = [(flight.policy_version, 0, n)]
        for i, (version, lo, hi) in enumerate(ranges):
            last = i == len(ranges) - 1
            self.segments.append(
                Segment(
                    start=start + lo,
                    end=start + hi,
                    backend_id=backend.id,
                    policy_version=version,
                    finish_reason=completion.finish_reason if last else "weight_update",
                    logprobs_mode=backend.logprobs_mode,
                )
            )

    async def add_messages(self, messages: Sequence[ChatMessage]) -> None:
        if self._awaiting_reply:
            raise RuntimeError("add_messages() must follow a generated turn")
        if not messages:
            raise ValueError("add_messages() needs at least one message")
        new = [m.copy() for m in messages]
        probe: list[ChatMessage] = [
            *self._first_messages,
            {"role": "assistant", "content": _PROBE_REPLY},
        ]
        if self._probe_closed is None:
            await self._render_probe(probe)
        assert self._probe_closed is not None
        full = await self.tokenize_chat([*probe, *new], self.tools, add_generation_prompt=True)
        n = len(self._probe_closed)
        if full.token_ids[:n] != self._probe_closed:
            raise InfraError(
                "the chat template re-renders earlier turns when messages are appended",
                cause="template_not_prefix_stable",
            )
        last_turn = self.response_ids[self.segments[-1].start :] if self.segments else []
        glue = self._closing[_closing_overlap(last_turn, self._closing) :]
        observation = glue + full.token_ids[n:]
        limit = self._context_limit()
        used = len(self.prompt_ids) + len(self.response_ids) + len(observation)
        if limit is not None and used >= limit:
            # Appending would leave no room to sample, and make the trajectory longer than
            # the model's context: end here instead.
            raise ContextLengthExceeded(
                f"context of {limit} tokens cannot take the next observation ({used} needed)"
            )
        self.response_ids.extend(observation)
        self.response_mask.extend([0] * len(observation))
        self.response_logprobs.extend([0.0] * len(observation))
        self._messages.extend(new)
        self._awaiting_reply = True

    # -- raw calls for the recording proxy (agentroll.server.proxy) ---------------------
    # The proxy keeps its own token chains but shares this session's backends, affinity,
    # retries, gate and timing counters, so a harness's traffic is routed, paused and
    # accounted exactly like a handler's.
    @property
    def sampling(self) -> dict[str, Any]:
        """The job's sampling parameters (sent explicitly with every generation call)."""
        return dict(self._sampling)

    @property
    def gate(self) -> GenerationGate:
        return self._gate

    async def tokenize_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
    ) -> TokenizeResult:
        """Server-side chat-template tokenization of a conversation the policy shaped."""
        shown = (list(messages), list(tools) if tools else None)
        result, _, _ = await self._call_with_backend(
            lambda c: c.tokenize_messages(
                *shown,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
            ),
            shaped=Shaped(
                lambda: json_digest(*shown, add_generation_prompt, continue_final_message),
                lambda c: c.tokenize_messages(
                    CONTROL_CONVERSATION, None, add_generation_prompt=True, timeout_s=self._timeout
                ),
            ),
        )
        return result

    async def template_divergence(self) -> int:
        """Turns at which a canonical re-render of the conversation would rewrite history.

        The recorded stream never re-renders earlier turns, so it stays exact (docs/design.md,
        invariant 3); a template that is not prefix-stable (e.g. Qwen3 dropping past `<think>`
        blocks) makes a trainer's own re-render differ from it exactly this many times.
        Compared on server-side tokenizations only.
        """
        ends = [i for i, m in enumerate(self._messages) if m.get("role") == "assistant"]
        if len(ends) < 2:
            return 0
        renders = await asyncio.gather(
            *(
                self.tokenize_chat(self._messages[: i + 1], self.tools, add_generation_prompt=False)
                for i in ends
            )
        )
        return sum(
            later.token_ids[: len(earlier.token_ids)] != earlier.token_ids
            for earlier, later in itertools.pairwise(renders)
        )

    async def sample(
        self,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        *,
        shaped: bool = True,
        routing_from: int | None = None,
    ) -> tuple[Completion, Backend, Flight]:
        """One generation call through the gate. `GenerationAborted` propagates (nothing was
        returned: sample again after resume); nothing is recorded in this session. `shaped`:
        the policy made this prompt, so it is contained (module docstring). `routing_from`:
        ask for MoE routed experts from that prompt position on."""
        check_token_ids(prompt_ids, None)  # each backend's own vocabulary: `_call_with_backend`
        completion, backend, flight = await self._call_with_backend(
            self._completion(prompt_ids, sampling, routing_from),
            gated=True,
            shaped=Shaped(
                lambda: token_digest(prompt_ids, sampling.get("stop")),
                # The job's sampling only: `sampling` may hold the caller's stop strings, and
                # a control that fails on what the policy sent would blame the backend.
                self._completion(CONTROL_PROMPT, call_sampling(self._sampling, 1, 0)),
            )
            if shaped
            else None,
            vet=lambda vocab_size: check_token_ids(prompt_ids, vocab_size),
        )
        assert flight is not None
        self._gate.load.record(len(prompt_ids), len(completion.token_ids))
        return completion, backend, flight

    def describe_last_reply(self, message: ChatMessage) -> None:
        if not self._messages or self._messages[-1].get("role") != "assistant":
            raise RuntimeError("describe_last_reply() needs a generated turn")
        if message.get("role") != "assistant":
            raise ValueError("the last reply is an assistant message")
        self._messages[-1] = message.copy()

    # -- internals ------------------------------------------------------------------------
    async def _render_probe(self, probe: list[ChatMessage]) -> None:
        tools = self.tools or None
        opened = await self._call(
            lambda c: c.tokenize_messages(
                probe, tools, add_generation_prompt=False, continue_final_message=True
            )
        )
        closed = await self._call(
            lambda c: c.tokenize_messages(probe, tools, add_generation_prompt=False)
        )
        if closed.token_ids[: len(opened.token_ids)] != opened.token_ids:
            raise InfraError(
                "the chat template renders a finished assistant turn inconsistently",
                cause="template_not_prefix_stable",
            )
        self._probe_closed = closed.token_ids
        self._closing = closed.token_ids[len(opened.token_ids) :]

    def _room(self, requested: int) -> int:
        """Tokens the next turn may sample; raises when nothing fits."""
        left = self._max_response_tokens - len(self.response_ids)
        if left < 1:
            raise ContextLengthExceeded(
                f"response budget of {self._max_response_tokens} tokens is used up"
            )
        limit = self._context_limit()
        if limit is not None:
            room = limit - len(self.prompt_ids) - len(self.response_ids)
            if room < 1:
                raise ContextLengthExceeded(
                    f"context of {limit} tokens is full "
                    f"({len(self.prompt_ids) + len(self.response_ids)} used)"
                )
            left = min(left, room)
        return min(requested, left)

    def _context_limit(self) -> int | None:
        return self._max_context_tokens or self._max_model_len
