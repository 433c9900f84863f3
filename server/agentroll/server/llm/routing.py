"""`RoutedCalls`: how a session's calls reach backends -- routing, retries, the pause gate,
timing, and the containment of requests the policy shaped (poison.py).

A call goes to a backend of the session's policy and tokenizer identity (affinity first);
a retryable failure is retried on another backend while nothing was committed, up to
`MAX_ATTEMPTS`. Every generation try, a retry included, passes the pause gate. A request the
policy shaped is never retried on another backend after one failed on it: a control request on
the same backend, and the request sent once more there, decide whether that was the request's
doing (`UnservableRequest`), a hiccup (served), or the backend's (`LLMUnavailable`).
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agentroll.handlers import ContextLengthExceeded, LLMUnavailable, UnservableRequest
from agentroll.server.llm.backend_pool import Backend, BackendPool
from agentroll.server.llm.base import BackendClient, BackendError, BackendPaused
from agentroll.server.llm.gate import Flight, GenerationAborted, GenerationGate
from agentroll.server.llm.poison import Shaped, failed_on_request, refused_request
from agentroll.server.logs import backend_var
from agentroll.server.schema import DEFAULT_POLICY, LogprobsMode

if TYPE_CHECKING:
    from agentroll.server.metrics import ServerMetrics

MAX_ATTEMPTS = 3
PAUSED_BACKOFF_S = (0.25, 5.0)


class RoutedCalls:
    def __init__(
        self,
        pool: BackendPool,
        *,
        tags: frozenset[str],
        gate: GenerationGate,
        request_timeout_s: float,
        metrics: "ServerMetrics | None",
        backend_wait_s: float,
        policy: str = DEFAULT_POLICY,
        logprobs_mode: LogprobsMode | None = None,
    ) -> None:
        """`logprobs_mode`: the job's; only backends known to give those logprobs serve it."""
        self._pool = pool
        self.logprobs_mode = logprobs_mode
        self.policy = policy
        self._tags = tags
        self._gate = gate
        self._metrics = metrics
        self._timeout = request_timeout_s
        self._backend_wait_s = backend_wait_s
        self._affinity: str | None = None
        self._tokenizer_key: str | None = None
        self.llm_s = 0.0
        self.llm_calls = 0
        self.retries: list[dict[str, str]] = []

    async def _choose(self, exclude: frozenset[str]) -> Backend:
        """A backend for the next call; if none is registered yet, wait a bounded time."""
        give_up = time.monotonic() + self._backend_wait_s
        while True:
            try:
                return self._pool.choose(
                    self._tags,
                    self._affinity,
                    exclude,
                    self._tokenizer_key,
                    self.policy,
                    self.logprobs_mode,
                )
            except LLMUnavailable:
                left = give_up - time.monotonic()
                if exclude or left <= 0:
                    raise
                await self._pool.wait_for_change(left)

    async def _call(self, fn: Callable[[BackendClient], Any]) -> Any:
        result, _, _ = await self._call_with_backend(fn)
        return result

    def _rechoose(self, backend: Backend, tried: set[str]) -> Backend:
        """The chosen backend, unless it went away or down while the try waited at the gate."""
        if backend.routable and self._pool.get(backend.id) is backend:
            return backend
        return self._pool.choose(
            self._tags,
            self._affinity,
            frozenset(tried),
            self._tokenizer_key,
            self.policy,
            self.logprobs_mode,
        )

    async def _try(
        self, backend: Backend, fn: Callable[[BackendClient], Any], flight: Flight | None
    ) -> Any:
        """One call on `backend`, timed and counted; failures are noted on the backend."""
        started = time.monotonic()
        backend_var.set(backend.id)
        try:
            with self._pool.track(backend):
                call = fn(backend.client)
                return await (call if flight is None else flight.run(call))
        except BackendError as exc:
            backend.failures_total += 1
            if self._metrics is not None:
                self._metrics.llm_failures.labels(backend.id).inc()
            if exc.status is None and not exc.timed_out:  # no answer at all: unreachable
                backend.mark_down(str(exc))
            raise
        finally:
            took = time.monotonic() - started
            self.llm_s += took
            self.llm_calls += 1
            if self._metrics is not None:
                self._metrics.llm_request_seconds.labels(backend.id).observe(took)

    @contextlib.asynccontextmanager
    async def _attempt(self, gated: bool) -> AsyncIterator[Flight | None]:
        """One try's slot: generation tries each pass the gate, other calls are not gated."""
        if not gated:
            yield None
            return
        async with self._gate.dispatch() as flight:
            yield flight

    async def _call_with_backend(
        self,
        fn: Callable[[BackendClient], Any],
        *,
        gated: bool = False,
        shaped: Shaped | None = None,
        vet: Callable[[int | None], None] | None = None,
    ) -> tuple[Any, Backend, Flight | None]:
        """Run one backend call, retrying on another backend while nothing was committed.

        `shaped` marks a request the policy shaped: one the quarantine holds is refused, one a
        backend refuses while it serves a control ends the call with `UnservableRequest`
        (refusing the control too, the backend or the job's sampling is at fault:
        `LLMUnavailable`), and one a backend fails on is
        contained to that backend (`_contain` says whose fault it is then). `vet`
        refuses a request a backend cannot take before it is sent there.

        Each try, a retry included, holds its own gate slot (`gated`): a pause that starts
        between two tries holds the retry back until resume. A backend paused outside our gate
        (an operator, another trainer process) answers `BackendPaused`: that is waited out,
        with backoff, for at most `backend_wait_s`, and does not count as a failed try."""
        quarantine = self._pool.quarantine
        if shaped is not None and len(quarantine):
            quarantine.check(shaped.digest())
        tried: set[str] = set()
        last_error: BackendError | None = None
        paused = _PausedBackends(self._backend_wait_s)
        while len(tried) < MAX_ATTEMPTS:
            try:
                backend = await self._choose(frozenset(tried))
            except LLMUnavailable:
                if last_error is None:
                    raise
                break
            try:
                async with self._attempt(gated) as flight:
                    if flight is not None:
                        backend = self._rechoose(backend, tried)  # a pause may have changed it
                        flight.backend_id = backend.id
                    if vet is not None:  # SGLang's is read once, within its detection timeout
                        vet(await backend.client.vocab_size())
                    result = await self._try(backend, fn, flight)
            except BackendPaused as exc:
                await paused.wait_out(exc)
                continue
            except BackendError as exc:
                if shaped is not None and failed_on_request(exc):
                    return await self._contain(backend, fn, exc, shaped, gated)
                if shaped is not None and refused_request(exc):
                    # The request's fault only if the backend serves a control: one it refuses
                    # too is refusing the job's own sampling (or everything): infra.
                    if await self._serves_control(backend, shaped.control, gated):
                        raise UnservableRequest(str(exc), status=exc.status or 400) from exc
                    raise LLMUnavailable(
                        f"backend {backend.id} refused a request and a control request too: {exc}",
                        cause="llm_backend_error",
                    ) from exc
                if not exc.retryable:
                    raise LLMUnavailable(str(exc), cause="llm_backend_error") from exc
                tried.add(backend.id)
                last_error = exc
                self.retries.append({"backend": backend.id, "error": str(exc)[:300]})
                continue
            self._affinity = backend.id
            return result, backend, flight
        raise LLMUnavailable(
            f"no backend could serve the request after {len(tried)} attempt(s): {last_error}",
            cause="llm_backend_unavailable",
        ) from last_error

    async def _contain(
        self,
        backend: Backend,
        fn: Callable[[BackendClient], Any],
        exc: BackendError,
        shaped: Shaped,
        gated: bool,
    ) -> tuple[Any, Backend, Flight | None]:
        """`backend` failed right after a request the policy shaped: the request goes to no
        other backend. A control request decides whose fault that was: failed too, the
        backend's (`LLMUnavailable`). Served, the request is sent once more to this backend,
        which just showed it is alive: a failure that does not repeat (a hiccup, an engine
        behind a load balancer that restarted) is nobody's, and the request is served; one
        that repeats is the request's (`UnservableRequest`), and it is never sent again."""
        quarantine = self._pool.quarantine
        digest = shaped.digest()
        quarantine.add(digest, backend.id)  # held back from every backend meanwhile
        if not await self._serves_control(backend, shaped.control, gated):
            raise LLMUnavailable(
                f"backend {backend.id} failed right after a request and on a control "
                f"request too (the request is not sent to another backend): {exc}",
                cause="llm_backend_unavailable",
            ) from exc
        try:
            result, flight = await self._once_on(backend, fn, gated)
        except GenerationAborted:
            quarantine.discard(digest)  # nothing was decided: the caller samples it again
            raise
        except BackendError as again:
            if not failed_on_request(again):
                raise LLMUnavailable(
                    f"backend {backend.id} served a control request, then not this request: "
                    f"{again}",
                    cause="llm_backend_unavailable",
                ) from again
            self._pool.mark_up(backend)  # alive a moment ago: the request is quarantined
            raise UnservableRequest(
                f"the backend failed right after this request ({exc}), served a control "
                "request, and failed on this request again: it is not sent again",
                status=502,
            ) from again
        quarantine.discard(digest)
        self._affinity = backend.id
        return result, backend, flight

    async def _once_on(
        self, backend: Backend, fn: Callable[[BackendClient], Any], gated: bool
    ) -> tuple[Any, Flight | None]:
        """One call on `backend` and no other; a pause outside our gate is waited out as any
        call's is (`LLMUnavailable` if it lasts beyond `backend_wait_s`)."""
        paused = _PausedBackends(self._backend_wait_s)
        while True:
            try:
                async with self._attempt(gated) as flight:
                    if flight is not None:
                        flight.backend_id = backend.id
                    return await self._try(backend, fn, flight), flight
            except BackendPaused as exc:
                await paused.wait_out(exc)

    async def _serves_control(
        self, backend: Backend, control: Callable[[BackendClient], Any], gated: bool
    ) -> bool:
        """Whether `backend` still serves a request nobody shaped (through the gate like any
        generation, bounded by the request timeout). Served, the backend is routed to again
        (a dropped connection marked it down): the request is quarantined, not the backend.
        A control a pause aborted or refused decided nothing: it is asked again after resume."""
        while True:
            try:
                await self._once_on(backend, control, gated)
                break
            except GenerationAborted:
                continue  # the next try waits at the gate until resume
            except (BackendError, ContextLengthExceeded):
                return False
        self._pool.mark_up(backend)
        return True


class _PausedBackends:
    """How long one call has waited for backends paused outside agentroll's gate."""

    def __init__(self, limit_s: float) -> None:
        self._limit_s = limit_s
        self._since: float | None = None
        self._delay = PAUSED_BACKOFF_S[0]

    async def wait_out(self, exc: BackendPaused) -> None:
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since >= self._limit_s:
            raise LLMUnavailable(
                f"the backend stayed paused for {self._limit_s:g} s: {exc}",
                cause="llm_backend_paused",
            ) from exc
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, PAUSED_BACKOFF_S[1])
