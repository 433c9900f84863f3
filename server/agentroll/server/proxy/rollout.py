"""`RolloutProxy`: one rollout's recording LLM endpoint, in whatever API its harness speaks.

It serves the chat-style APIs of `apis.APIS` (OpenAI chat completions and Responses,
Anthropic Messages, Google generateContent; each plain and streamed, see wire.py),
`/v1/completions` (token-id prompts), `/v1/models` and, where the handler serves a task's
tools (`serve_mcp`), `/mcp` on a Unix socket in the rollout's
sandbox socket directory. Every request must carry the rollout's secret as its API key (in
the header its API's clients send it in). Each chat call becomes token-level
generation through the job's `TokenSession` (same backends, affinity, retries, pause gate and
timing): the backend tokenizes the conversation, `ChainBook` decides which chain it extends
and so the exact prompt ids, the backend samples through the gate, and the sampled ids and
logprobs are recorded verbatim. The reply goes back in the request's format, tool calls
parsed with the rollout's parser; errors come in that format's envelope.

Each request is judged from its head alone, before its body is read (`admit`): over the
rollout's request rate it gets 429 with `Retry-After`; without the rollout's key, 401. The
server (http11.py) enforces the body-size and connection caps (`ProxyCaps`, caps.py). None
of these refusals stops the proxy: a flood is the harness's own doing. The call caps
(calls, sampled tokens, time) are checked as each call arrives: a call past a cap is refused
with 403 and the proxy stops with kind `limit`; a backend the proxy cannot reach stops it
with kind `infra` (503). The handler watches `wait_stopped()` to end the harness.

One module, though over 500 lines: admission, the caps and every route read and change the
same per-rollout state (calls, reservations, the stop), and one request's path reads top
to bottom here; the wire formats, chains and transport already live in their own modules.
"""

import asyncio
import hmac
import logging
import math
import secrets
import time
from pathlib import Path
from typing import Any

from agentroll.handlers import (
    ContextLengthExceeded,
    InfraError,
    LLMUnavailable,
    ProxyLimits,
    ProxyStop,
    UnservableRequest,
)
from agentroll.handlers.mcp import PARSE_ERROR, McpAnswer
from agentroll.handlers.mcp import error as mcp_error
from agentroll.handlers.toolcalls import ToolCall, ToolCallParser, openai_tool_call
from agentroll.server.llm import Backend, BackendError, Completion, TokenSession
from agentroll.server.llm.gate import Flight, GenerationAborted
from agentroll.server.llm.session import call_sampling
from agentroll.server.proxy import openai_api as api
from agentroll.server.proxy.apis import APIS, OPENAI_CHAT
from agentroll.server.proxy.caps import ProxyCaps, RequestRate
from agentroll.server.proxy.chains import ChainBook, Expectation, Piece, Placement
from agentroll.server.proxy.echoes import ReturnedCalls
from agentroll.server.proxy.http11 import BadRequest, Request, Response, UnixHTTPServer
from agentroll.server.proxy.recording import ProxyTrajectory, report, trajectory_view
from agentroll.server.proxy.wire import ChatReply, ChatRequest, WireAPI, route
from agentroll.server.schema.messages import ChatMessage, ToolSpec

log = logging.getLogger("agentroll.server.proxy")

MODEL_NAME = "policy"
EXPECTATION_WAIT_S = 60.0


class RolloutProxy:
    def __init__(
        self,
        session: TokenSession,
        *,
        socket_path: Path,
        inside_path: str,
        limits: ProxyLimits,
        max_sampled_tokens: int,
        context_tokens: int | None,
        parser: ToolCallParser,
        label: str = "",
        caps: ProxyCaps | None = None,
    ) -> None:
        self._session = session
        self._caps = caps or ProxyCaps()
        self._rate = RequestRate(self._caps.request_burst, self._caps.requests_per_s)
        self._server = UnixHTTPServer(
            socket_path,
            self.handle,
            admit=self.admit,
            max_body_bytes=self._caps.max_body_bytes,
            max_connections=self._caps.max_connections,
        )
        self._inside = inside_path
        self._limits = limits
        self._max_sampled = min(limits.max_sampled_tokens or max_sampled_tokens, max_sampled_tokens)
        self._context_tokens = context_tokens
        self._model_len: int | None = None
        """The model's context as the backend reported it with a tokenization."""
        self._parser = parser
        self._label = label or "rollout"
        self._key = "arp-" + secrets.token_urlsafe(24)
        self._opened = time.monotonic()
        self._stop: ProxyStop | None = None
        self._stopped = asyncio.Event()
        self._listening = False
        self._replies: dict[int, str] = {}
        """Each finished call's sampled text, by call index."""
        self._reserved = 0
        """Tokens promised to calls still sampling (counted against the cap at admission)."""
        self._closing: dict[bool, list[int]] = {}
        self._returned = ReturnedCalls()
        self.book = ChainBook()
        self.calls: list[dict[str, Any]] = []
        self.sampled_tokens = 0
        self.refused: dict[str, int] = {}
        self.context_overflows = 0
        self.mixed_version_segments = 0
        self._mcp: McpAnswer | None = None
        self._mcp_answers: set[asyncio.Task[dict[str, Any] | None]] = set()
        """`/mcp` answers in flight: they outlive their connection, `close()` waits for them."""

    # -- LLMProxy protocol ----------------------------------------------------------------
    @property
    def api_key(self) -> str:
        return self._key

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def socket_path(self) -> str:
        return self._inside

    @property
    def stopped(self) -> ProxyStop | None:
        return self._stop

    @property
    def last_reply(self) -> str | None:
        """The last reply of the chain that becomes the trajectory: what an answer task
        scores is what the trajectory's own tokens said (a side call cannot stand in)."""
        main = self.book.main()
        if main is None:
            return None
        return next((self._replies[c] for c in reversed(main.calls) if c in self._replies), None)

    @property
    def num_calls(self) -> int:
        return len(self.calls)

    async def wait_stopped(self) -> ProxyStop:
        await self._stopped.wait()
        assert self._stop is not None
        return self._stop

    def report(self) -> dict[str, Any]:
        return report(self)

    async def start(self) -> None:
        try:
            await self._server.start()
            self._listening = True
        except OSError as exc:
            raise InfraError(
                f"the LLM proxy cannot listen on {self._server.path}: {exc}",
                cause="llm_proxy_failed",
            ) from exc

    @property
    def listening(self) -> bool:
        return self._listening

    def serve_mcp(self, answer: McpAnswer) -> None:
        self._mcp = answer

    async def close(self, mcp_wait_s: float = 0.0) -> None:
        """Stop listening; a task's tool call still being answered on `/mcp` (its harness
        gone, or its connection closed) is waited for, up to `mcp_wait_s`, so that what the
        task did for it (an environment's step and its reward) is recorded; then cancelled."""
        self._listening = False
        await self._server.close()
        await self._drain_mcp(mcp_wait_s)
        self.book.close()

    async def _drain_mcp(self, wait_s: float) -> None:
        answers = set(self._mcp_answers)
        if not answers:
            return
        # A cancelled rollout (RUN's timeout, a cancelled job) keeps no reward: no waiting.
        current = asyncio.current_task()
        bound = 0.0 if current is not None and current.cancelling() else max(0.0, wait_s)
        _, late = await asyncio.wait(answers, timeout=bound)
        if late and bound:
            log.warning(
                "%s: %d /mcp answer(s) still running after %g s", self._label, len(late), bound
            )
        for task in late:
            task.cancel()
        # Collected here: their connections are gone, nobody else reads their outcome.
        await asyncio.gather(*answers, return_exceptions=True)

    def trajectory(self) -> ProxyTrajectory | None:
        """The main chain as the trajectory's token fields (None before any call)."""
        return trajectory_view(self, self._session)

    # -- HTTP ------------------------------------------------------------------------------
    def admit(self, method: str, path: str, headers: dict[str, str]) -> Response | None:
        """Judge a request from its head, before its body is read: its rate, then its key
        (`/health` needs none). Refusals come in the format the path belongs to."""
        wire = route(APIS, method, path) or OPENAI_CHAT
        wait_s = self._rate.wait_s()
        if wait_s:
            caps = self._caps
            message = (
                f"rate limit: at most {caps.request_burst} requests at once and "
                f"{caps.requests_per_s:g} per second per rollout"
            )
            return self._refuse(
                wire, "rate_limited", 429, message, "requests", "rate_limit_exceeded", wait_s
            )
        if method == "GET" and path.removeprefix("/v1") == "/health":
            return None
        if hmac.compare_digest(wire.credential(headers).encode(), self._key.encode()):
            return None
        return self._refuse(
            wire, "unauthorized", 401, "invalid API key for this rollout",
            "invalid_request_error", "invalid_api_key",
        )  # fmt: skip

    def _refuse(
        self,
        wire: WireAPI,
        why: str,
        status: int,
        message: str,
        type_: str,
        code: str | None = None,
        wait_s: float = 1.0,
    ) -> Response:
        self.refused[why] = self.refused.get(why, 0) + 1
        headers = {"Retry-After": str(math.ceil(wait_s))} if status == 429 else {}
        return Response(status, wire.error(status, message, type_, code), headers=headers)

    async def handle(self, request: Request) -> Response:
        """Serve an admitted request (see `admit`)."""
        path = request.path.removeprefix("/v1")
        if request.method == "GET" and path == "/health":
            return Response(200, {"status": "ok"})
        if request.method == "GET" and path == "/models":
            return Response(200, api.models_body(MODEL_NAME))
        if path == "/mcp" and self._mcp is not None:
            return await self._serve_mcp(self._mcp, request)
        tokens_in = request.method == "POST" and path == "/completions"
        wire = OPENAI_CHAT if tokens_in else route(APIS, request.method, request.path)
        if wire is None:
            message = f"no route {request.method} {request.path}"
            return Response(404, OPENAI_CHAT.error(404, message, "not_found"))
        refusal = self._admit(wire)
        if refusal is not None:
            return refusal
        try:
            if tokens_in:
                return await self._completion(api.parse_completion(request.json()))
            return await self._chat(wire, wire.parse(request))
        except BadRequest as exc:
            return Response(exc.status, wire.error(exc.status, str(exc), "invalid_request_error"))
        except UnservableRequest as exc:  # the policy's request, contained (llm/poison.py)
            return self._refuse(
                wire, "unservable", exc.status, str(exc), "invalid_request_error",
                "unservable_request",
            )  # fmt: skip
        except ContextLengthExceeded as exc:
            self.context_overflows += 1
            message = f"maximum context length exceeded: {exc}"
            error = wire.error(400, message, "invalid_request_error", "context_length_exceeded")
            return Response(400, error)
        except (LLMUnavailable, InfraError, BackendError) as exc:
            cause = getattr(exc, "cause", None) or "llm_backend_error"
            self._set_stop(ProxyStop("infra", cause, f"the LLM proxy could not generate: {exc}"))
            error = wire.error(503, str(exc), "server_error", "backend_unavailable")
            return Response(503, error)

    async def _serve_mcp(self, answer: McpAnswer, request: Request) -> Response:
        """Streamable-HTTP MCP, JSON answers only: no server-to-client stream (GET), no
        session to end (DELETE). The answer runs as a task of its own, shielded from its
        connection's end: a tool call the task has started is finished and recorded even
        when the harness hangs up or the proxy closes (`close` waits for it)."""
        if request.method != "POST":
            return Response(405, None, headers={"Allow": "POST"})
        try:
            message = request.json()
        except BadRequest as exc:
            return Response(200, mcp_error(None, PARSE_ERROR, str(exc)))
        task = asyncio.create_task(answer(message), name=f"mcp-answer:{self._label}")
        self._mcp_answers.add(task)
        task.add_done_callback(self._mcp_answers.discard)
        reply = await asyncio.shield(task)
        return Response(202) if reply is None else Response(200, reply)

    def _admit(self, wire: WireAPI) -> Response | None:
        """Refuse a call past a cap (and stop the proxy) or after it stopped."""
        limits = self._limits
        if self._stop is None:
            if limits.max_calls is not None and len(self.calls) >= limits.max_calls:
                self._set_stop(
                    ProxyStop("limit", "max_calls", f"call cap of {limits.max_calls} reached")
                )
            elif self.sampled_tokens + self._reserved >= self._max_sampled:
                self._set_stop(
                    ProxyStop(
                        "limit", "max_tokens", f"sampled-token cap of {self._max_sampled} reached"
                    )
                )
            elif (
                limits.time_limit_s is not None
                and time.monotonic() - self._opened > limits.time_limit_s
            ):
                self._set_stop(
                    ProxyStop(
                        "limit", "time_limit", f"time cap of {limits.time_limit_s:g} s reached"
                    )
                )
        if self._stop is None:
            return None
        if self._stop.kind == "limit":
            return self._refuse(wire, "limit", 403, self._stop.message, "rollout_limit_exceeded")
        return self._refuse(wire, "stopped", 503, self._stop.message, "server_error")

    def _set_stop(self, stop: ProxyStop) -> None:
        if self._stop is None:
            self._stop = stop
            self._stopped.set()
            log.info("%s: LLM proxy stopped: %s (%s)", self._label, stop.cause, stop.message)

    # -- calls -------------------------------------------------------------------------------
    async def _chat(self, wire: WireAPI, req: ChatRequest) -> Response:
        began = time.monotonic()
        index = self._new_call("count_tokens" if req.count_only else "chat", req.stream)
        self.calls[index]["api"] = wire.name
        messages = self._returned.restore(req.messages, req.tools)
        canonical = await self._session.tokenize_chat(
            messages, req.tools, add_generation_prompt=True
        )
        if req.count_only:  # a side call that samples nothing
            n = self.calls[index]["prompt_tokens"] = len(canonical.token_ids)
            nothing: ChatMessage = {"role": "assistant", "content": None}
            return wire.answer(
                ChatReply(f"{self._label}-{index}", MODEL_NAME, nothing, "stop", n, 0), req
            )
        expectations = await self.book.expectations(EXPECTATION_WAIT_S)
        self.calls[index]["backend_s"] = time.monotonic() - began  # grown by _generate
        placement = self.book.place(index, canonical.token_ids, req.tools, expectations)
        self._model_len = canonical.max_model_len or self._model_len
        limit = self._context_tokens or canonical.max_model_len
        pieces, text, finish = await self._generate(
            index, placement, req.max_tokens, req.stop, limit
        )
        reply, finish = self._reply(index, text, finish, req.parse_tools)
        self._returned.remember(reply)
        self.book.commit(index, placement, pieces, [*messages, reply])
        chain = placement.chain
        chain.expectation = asyncio.create_task(
            self._expect([*messages, reply], req.tools, len(canonical.token_ids)),
            name=f"proxy-expect:{self._label}:{index}",
        )
        sampled = sum(len(p.token_ids) for p in pieces)
        self._finish_record(index, placement, sampled, finish, began)
        turn = ChatReply(
            f"{self._label}-{index}", MODEL_NAME, reply, finish, len(placement.prompt), sampled
        )
        return wire.answer(turn, req)

    async def _completion(self, req: api.CompletionRequest) -> Response:
        began = time.monotonic()
        index = self._new_call("completion", req.stream)
        placement = self.book.place(index, req.prompt_ids, [], None)
        limit = self._context_tokens or self._model_len  # a longer prompt is never sent
        pieces, text, finish = await self._generate(
            index, placement, req.max_tokens, req.stop, limit
        )
        self.book.commit(index, placement, pieces, placement.chain.messages)
        sampled = sum(len(p.token_ids) for p in pieces)
        finish = "length" if finish in ("length", "abort") else "stop"
        self._finish_record(index, placement, sampled, finish, began)
        counts = api.usage(len(placement.prompt), sampled)
        body = api.completion_body(f"cmpl-{self._label}-{index}", MODEL_NAME, text, finish, counts)
        if req.stream:
            return Response(200, events=api.completion_events(body, req.include_usage))
        return Response(200, body)

    def _new_call(self, kind: str, stream: bool) -> int:
        self.calls.append({"call": len(self.calls), "kind": kind, "stream": stream})
        return len(self.calls) - 1

    def _finish_record(
        self, index: int, placement: Placement, sampled: int, finish: str, began: float
    ) -> None:
        self.calls[index].update(
            chain_id=placement.chain.index,
            extended=not placement.new,
            prompt_tokens=len(placement.prompt),
            sampled_tokens=sampled,
            finish_reason=finish,
            seconds=round(time.monotonic() - began, 6),
            backend_s=round(self.calls[index].get("backend_s", 0.0), 6),
        )

    def _reply(self, index: int, text: str, finish: str, parse: bool) -> tuple[ChatMessage, str]:
        calls: tuple[ToolCall, ...] = ()
        content: str | None = text
        if parse:
            parsed = self._parser.parse(text)
            if parsed.ok:  # a malformed call: the harness sees the raw text, as vLLM does
                parsed = parsed.with_call_ids(f"call_{index}_")
                calls, content = parsed.calls, parsed.content
        message: ChatMessage = {
            "role": "assistant",
            "content": content if content or not calls else None,
        }
        if calls:
            message["tool_calls"] = [openai_tool_call(c) for c in calls]
        if finish in ("length", "abort"):
            return message, "length"
        return message, "tool_calls" if calls else "stop"

    async def _generate(
        self,
        index: int,
        placement: Placement,
        max_tokens: int | None,
        stop: list[str],
        limit: int | None,
    ) -> tuple[list[Piece], str, str]:
        """Sample one reply from `placement.prompt`; a pause may split it into pieces."""
        sampling = self._session.sampling
        wanted = min(x for x in (max_tokens, sampling.get("max_tokens"), 1 << 30) if x)
        stops = list(dict.fromkeys([*(sampling.get("stop") or []), *stop]))
        pieces: list[Piece] = []
        texts: list[str] = []
        got = 0
        try:
            while True:
                budget = self._budget(wanted - got, len(placement.prompt) + got, limit)
                prompt = placement.prompt + [t for p in pieces for t in p.token_ids]
                params = {**call_sampling(sampling, budget, got), "stop": stops}
                asked = time.monotonic()
                self._reserved += budget  # concurrent calls share the cap, never overshoot it
                try:
                    completion, backend, flight = await self._session.sample(prompt, params)
                except GenerationAborted:
                    continue  # nothing came back: sample this part again after resume
                finally:
                    self._reserved -= budget
                    record = self.calls[index]
                    record["backend_s"] = record.get("backend_s", 0.0) + time.monotonic() - asked
                pieces += self._pieces(completion, backend, flight)
                texts.append(completion.text)
                got += len(completion.token_ids)
                self.sampled_tokens += len(completion.token_ids)
                if completion.finish_reason != "abort" or got >= wanted:
                    self._replies[index] = "".join(texts)
                    return pieces, self._replies[index], completion.finish_reason
        except BaseException as exc:
            self.calls[index]["error"] = type(exc).__name__
            if pieces:  # keep what was sampled: the chain stays exact, the call just ends
                self.book.commit(index, placement, pieces, placement.chain.messages)
            else:
                self.book.abandon(placement)
            raise

    def _budget(self, wanted: int, used: int, limit: int | None) -> int:
        left = min(wanted, self._max_sampled - self.sampled_tokens - self._reserved)
        if limit is not None:
            room = limit - used
            if room < 1:
                raise ContextLengthExceeded(f"context of {limit} tokens is full ({used} used)")
            left = min(left, room)
        return max(left, 1)

    def _pieces(self, completion: Completion, backend: Backend, flight: Flight) -> list[Piece]:
        ids, lps = completion.token_ids, completion.logprobs
        ranges = self._session.gate.stamp(flight, len(ids), completion.weight_versions)
        if ranges is None:
            self.mixed_version_segments += 1  # cannot tell which tokens came from which
            ranges = [(flight.policy_version, 0, len(ids))]
        last = len(ranges) - 1
        return [
            Piece(
                ids[lo:hi],
                lps[lo:hi],
                backend.id,
                version,
                completion.finish_reason if i == last else "weight_update",
                backend.logprobs_mode,
            )
            for i, (version, lo, hi) in enumerate(ranges)
        ]

    async def _expect(
        self, conversation: list[ChatMessage], tools: list[ToolSpec], prompt_len: int
    ) -> Expectation | None:
        """Render the chain's tip as a continuation must begin (runs while the harness works)."""
        try:
            closed = await self._session.tokenize_chat(
                conversation, tools, add_generation_prompt=False
            )
            has_calls = bool(conversation[-1].get("tool_calls"))
            closing = self._closing.get(has_calls)
            if closing is None:
                opened = await self._session.tokenize_chat(
                    conversation, tools, add_generation_prompt=False, continue_final_message=True
                )
                n = len(opened.token_ids)
                if closed.token_ids[:n] != opened.token_ids:
                    return None  # the template renders a finished turn inconsistently
                closing = self._closing[has_calls] = closed.token_ids[n:]
        except (
            LLMUnavailable, InfraError, BackendError, ContextLengthExceeded, UnservableRequest
        ) as exc:  # fmt: skip
            log.warning("%s: cannot render the reply for chain matching: %s", self._label, exc)
            return None
        return Expectation(list(closed.token_ids), list(closing), prompt_len)


async def open_proxy(
    session: TokenSession,
    socket_dir: Path,
    *,
    inside_dir: str,
    name: str,
    limits: ProxyLimits,
    parser: ToolCallParser,
    max_sampled_tokens: int,
    context_tokens: int | None,
    label: str,
    caps: ProxyCaps | None = None,
) -> RolloutProxy:
    """Start a rollout's proxy on `socket_dir/name` (seen as `inside_dir/name` in the sandbox)."""
    proxy = RolloutProxy(
        session,
        socket_path=socket_dir / name,
        inside_path=f"{inside_dir.rstrip('/')}/{name}",
        limits=limits,
        max_sampled_tokens=max_sampled_tokens,
        context_tokens=context_tokens,
        parser=parser,
        label=label,
        caps=caps,
    )
    await proxy.start()
    return proxy
