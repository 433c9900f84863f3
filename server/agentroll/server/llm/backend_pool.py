"""Registered inference backends and the choice of one per generation call.

Routing: least outstanding requests among the backends of the session's policy that carry
the requested tags, with session affinity so one trajectory's turns reuse the same backend's
prefix cache while that backend has room.
"""

import asyncio
import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentroll.handlers import LLMUnavailable
from agentroll.server.errors import BackendConflict
from agentroll.server.llm.base import BackendClient, BackendError
from agentroll.server.llm.http import HTTPClient, HTTPTransportError
from agentroll.server.llm.local_tokenizer import LocalChatTokenizer
from agentroll.server.llm.poison import RequestQuarantine
from agentroll.server.llm.registry import make_client
from agentroll.server.schema import DEFAULT_POLICY, BackendSpec, BackendView, LogprobsMode

MODE_QUERY_TIMEOUT_S = 10.0


@dataclass(eq=False)
class Backend:
    id: str
    spec: BackendSpec
    client: BackendClient
    in_flight: int = 0
    requests_total: int = 0
    failures_total: int = 0
    tags: frozenset[str] = field(default_factory=frozenset)
    healthy: bool = True
    draining: bool = False
    last_error: str | None = None
    _failed_probes: int = 0
    logprobs_mode: LogprobsMode | None = None
    """What its logprobs are: declared at registration, or learnt from the server."""
    _asked_mode: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while nothing is in flight on this backend."""

    def __post_init__(self) -> None:
        self.idle.set()
        self.logprobs_mode = self.spec.logprobs_mode

    async def learn_logprobs_mode(self, timeout_s: float = MODE_QUERY_TIMEOUT_S) -> None:
        """Ask the server once what its logprobs are (at registration, then by the health
        probes until it answers). `ValueError` where it contradicts the registration."""
        if self._asked_mode:
            return
        ask = getattr(self.client, "logprobs_mode", None)  # plugin kinds may predate it
        if ask is None:
            self._asked_mode = True
            return
        try:
            told = await ask(timeout_s=timeout_s)
        except BackendError as exc:
            self._asked_mode = not exc.retryable  # an answer it cannot read will not change
            return
        self._asked_mode = True
        self.logprobs_mode = told or self.spec.logprobs_mode  # the server's word wins
        if told is not None and self.spec.logprobs_mode not in (None, told):
            raise ValueError(
                f"backend {self.id} was registered with logprobs_mode "
                f"{self.spec.logprobs_mode!r}, but the server runs --logprobs-mode {told}"
            )

    def mark_down(self, error: str) -> None:
        """A transport failure: route around it at once; the next good probe restores it."""
        self.healthy = False
        self.last_error = error[:300]

    @property
    def routable(self) -> bool:
        return self.healthy and not self.draining

    @property
    def policy(self) -> str:
        """The policy whose weights it serves."""
        return self.spec.policy

    @property
    def tokenizer_key(self) -> str:
        """What decides the token ids this backend's model reads and writes: its served model
        name and local tokenizer. Backends that serve different models must name them."""
        return f"{self.spec.model or ''}\0{self.spec.tokenizer_path or ''}"

    def view(self) -> BackendView:
        return BackendView(
            id=self.id,
            kind=self.spec.kind,
            base_url=str(self.spec.base_url),
            model=self.spec.model,
            tags=sorted(self.tags),
            policy=self.spec.policy,
            max_concurrency=self.spec.max_concurrency,
            in_flight=self.in_flight,
            requests_total=self.requests_total,
            failures_total=self.failures_total,
            healthy=self.healthy,
            draining=self.draining,
            last_error=self.last_error,
            logprobs_mode=self.logprobs_mode,
        )

    @property
    def has_room(self) -> bool:
        return self.in_flight < self.spec.max_concurrency


class PromptCache:
    """First-prompt token ids by conversation, LRU-bounded.

    The n samples of a GRPO group share their prompt, and a tokenizer does not change when
    weights do, so one `/tokenize` call serves the whole group. Keys include the backend's
    tokenizer identity: the same conversation tokenizes differently for another model.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, tuple[list[int], int | None]] = OrderedDict()

    def get(self, key: str) -> tuple[list[int], int | None] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, token_ids: list[int], max_model_len: int | None) -> None:
        self._entries[key] = (token_ids, max_model_len)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)


class BackendPool:
    def __init__(self, http: HTTPClient) -> None:
        self._http = http
        self.prompts = PromptCache()
        self.quarantine = RequestQuarantine()
        """Requests the policy shaped that a backend failed on: never sent again."""
        self._backends: dict[str, Backend] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    def add(self, spec: BackendSpec) -> tuple[Backend, bool]:
        """Register a backend; idempotent for an identical spec. Returns (backend, created)."""
        backend_id = spec.id or f"backend-{next(self._ids)}"
        existing = self._backends.get(backend_id)
        if existing is not None:
            if existing.spec.model_dump(exclude={"id"}) != spec.model_dump(exclude={"id"}):
                raise BackendConflict(f"backend {backend_id!r} exists with a different spec")
            return existing, False
        spec = spec.model_copy(update={"id": backend_id})
        tokenizer = None
        if spec.tokenizer_path is not None:
            tokenizer = LocalChatTokenizer.from_dir(Path(spec.tokenizer_path))
        client = make_client(
            spec.kind, str(spec.base_url), spec.model, self._http, tokenizer=tokenizer
        )
        backend = Backend(backend_id, spec, client, tags=frozenset(spec.tags))
        self._backends[backend_id] = backend
        self._notify()
        return backend, True

    def _notify(self) -> None:
        """Wake rollouts waiting for a usable backend."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def probe(self, backend: Backend, timeout_s: float) -> None:
        """One health check: `/health` answers 200. Two failures in a row mark it down."""
        url = str(backend.spec.base_url).rstrip("/") + "/health"
        try:
            response = await self._http.request("GET", url, timeout_s=timeout_s)
            ok, error = response.status == 200, f"/health answered {response.status}"
        except HTTPTransportError as exc:
            ok, error = False, f"/health failed: {exc}"
        if ok:
            backend._failed_probes = 0
            self.mark_up(backend)
            try:  # a server that was unreachable at registration is asked here, off the hot path
                await backend.learn_logprobs_mode(min(timeout_s, MODE_QUERY_TIMEOUT_S))
            except ValueError as exc:  # it contradicts its registration: its answer is used
                backend.last_error = str(exc)[:300]
            return
        backend._failed_probes += 1
        backend.last_error = error
        if backend._failed_probes >= 2:
            backend.healthy = False

    def mark_up(self, backend: Backend) -> None:
        """The backend answered (a probe, a control request): route to it again."""
        if not backend.healthy:
            backend.healthy = True
            self._notify()

    async def probe_forever(self, interval_s: float, paused: Callable[[Backend], bool]) -> None:
        """The health-check loop (runs for the server's life). A backend whose policy is paused
        for a weight update is not probed: an engine mid-update may not answer /health
        (SGLang's runs a generation), and that is not a failure."""
        while True:
            await asyncio.gather(
                *(self.probe(b, timeout_s=interval_s) for b in self.all() if not paused(b)),
                return_exceptions=True,
            )
            await asyncio.sleep(interval_s)

    def remove(self, backend_id: str) -> bool:
        return self._backends.pop(backend_id, None) is not None

    def get(self, backend_id: str) -> Backend | None:
        return self._backends.get(backend_id)

    def all(self) -> list[Backend]:
        return list(self._backends.values())

    def views(self) -> list[BackendView]:
        return [b.view() for b in self._backends.values()]

    def __len__(self) -> int:
        return len(self._backends)

    def choose(
        self,
        tags: frozenset[str],
        affinity: str | None,
        exclude: frozenset[str] = frozenset(),
        tokenizer_key: str | None = None,
        policy: str = DEFAULT_POLICY,
        logprobs_mode: LogprobsMode | None = None,
    ) -> Backend:
        """The backend for the next call among those serving `policy`; `tokenizer_key` keeps a
        session on backends whose token ids mean what its recorded ids mean; `logprobs_mode`
        keeps it on backends known to give those logprobs."""
        matching = [
            b
            for b in self._backends.values()
            if b.spec.policy == policy
            and tags <= b.tags
            and b.id not in exclude
            and (tokenizer_key is None or b.tokenizer_key == tokenizer_key)
            and (logprobs_mode is None or b.logprobs_mode == logprobs_mode)
        ]
        candidates = [b for b in matching if b.routable]
        if not candidates:
            wanted = f" for policy {policy!r}" if policy != DEFAULT_POLICY else ""
            wanted += f" with tags {sorted(tags)}" if tags else ""
            if logprobs_mode is not None and not matching:
                modes = sorted({str(b.logprobs_mode) for b in self.all() if b.policy == policy})
                raise LLMUnavailable(
                    f"no LLM backend{wanted} gives {logprobs_mode} (the job's "
                    f"sampling.logprobs_mode); registered ones give: {', '.join(modes) or 'none'}"
                    " (None: not declared and not discoverable)",
                    cause="logprobs_mode_unavailable",
                )
            if matching:
                raise LLMUnavailable(
                    f"no healthy LLM backend{wanted} ({len(matching)} down or draining)",
                    cause="no_healthy_backend",
                )
            raise LLMUnavailable(f"no LLM backend{wanted} is registered", cause="no_backend")
        if affinity is not None:
            preferred = self._backends.get(affinity)
            if preferred is not None and preferred in candidates and preferred.has_room:
                return preferred
        return min(candidates, key=lambda b: b.in_flight / b.spec.max_concurrency)

    async def wait_for_change(self, timeout_s: float) -> None:
        """Until a backend is registered (or `timeout_s` passes)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    @contextmanager
    def track(self, backend: Backend) -> Iterator[None]:
        backend.in_flight += 1
        backend.requests_total += 1
        backend.idle.clear()
        try:
            yield
        finally:
            backend.in_flight -= 1
            if not backend.in_flight:
                backend.idle.set()
