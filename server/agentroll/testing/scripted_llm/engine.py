"""The simulated engine: in-flight runs, pause/resume/abort, metrics, the request log.

Generation itself is computed up front (it is cheap); what the engine simulates is *time*:
each request needs `latency_s` of unpaused generation time, spread evenly over its tokens.
That is enough to reproduce vLLM's pause semantics -- abort returns the tokens generated so
far, wait drains, keep freezes in-flight requests until `/resume` -- with one timer per
request and no per-token wake-ups (2,000 concurrent requests stay cheap).
"""

import asyncio
import itertools
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from agentroll.testing.scripted_llm.config import ScriptedLLMConfig
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.policy import Policy
from agentroll.testing.scripted_llm.template import ChatTemplate
from agentroll.testing.scripted_llm.tokenizer import ScriptedTokenizer

PAUSE_MODES = ("abort", "wait", "keep")
PAUSED_MESSAGE = "Generation is paused. Please retry after it resumes."
HOLD_POLL_S = 30.0  # re-check interval while a request is held by a pause


@dataclass(eq=False, slots=True)
class Run:
    """One in-flight completions request (all of its choices share one timeline)."""

    engine_ids: frozenset[str]
    epoch: int
    kv_tokens: int
    active_s: float = 0.0
    since: float | None = None
    """Loop time at which the current unpaused stretch began (None: not generating)."""
    aborted: bool = False
    versions: list[tuple[str, float]] = field(default_factory=list)
    """(weight version, fraction of the timeline at which it took over)."""


class Engine:
    """Per-app state; lives on `app.state.engine`."""

    def __init__(
        self,
        config: ScriptedLLMConfig,
        tokenizer: ScriptedTokenizer,
        template: ChatTemplate,
        policy: Policy,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.template = template
        self.policy = policy
        self.paused = False
        self.pause_mode: str | None = None
        self.weight_version = config.weight_version
        self.healthy = config.healthy
        self.fail_rate = config.fail_rate
        self.fail_next = 0
        """Generation requests still to fail (500) before the engine serves again (a hiccup)."""
        self.waiting = 0
        self.running: set[Run] = set()
        self.stats: Counter[str] = Counter()
        self.log: deque[dict[str, Any]] = deque(maxlen=config.request_log_size)
        self.received: deque[Any] = deque(maxlen=config.request_log_size)
        """The prompt of every generation request that arrived, as sent, refused ones too."""
        self.started_at = time.time()
        self._kv_tokens = 0
        self._epoch = 0
        self._nonce = itertools.count()
        self._fail_rng = random.Random(f"fail:{config.seed}")
        # Swapped (set, then replaced) on every pause/resume/abort/version change.
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- per-request helpers -------------------------------------------------------------

    def next_nonce(self) -> int:
        """Per-server counter for requests without a seed."""
        return next(self._nonce)

    def check_failure(self) -> None:
        hiccup = self.fail_next > 0
        self.fail_next -= hiccup
        if (
            hiccup
            or not self.healthy
            or (self.fail_rate and self._fail_rng.random() < self.fail_rate)
        ):
            raise ProtocolError("Internal server error", status=500, err_type="InternalServerError")

    async def admit(self) -> None:
        """Gate a new request: vLLM 0.33 refuses it during abort/wait pauses (503); otherwise
        it is queued until resume (vLLM 0.2x always, 0.33 in keep mode, SGLang always)."""
        if not self.paused:
            return
        refuses = self.config.flavor == "vllm" and self.config.version == "0.33"
        if refuses and self.pause_mode in ("abort", "wait"):
            raise ProtocolError(PAUSED_MESSAGE, status=503, err_type="ServiceUnavailableError")
        self.waiting += 1
        try:
            while self.paused:
                await self._wait_changed(HOLD_POLL_S)
        finally:
            self.waiting -= 1

    def start(self, engine_ids: list[str], kv_tokens: int) -> Run:
        run = Run(frozenset(engine_ids), self._epoch, kv_tokens)
        run.versions.append((self.weight_version, 0.0))
        self.running.add(run)
        self._kv_tokens += kv_tokens
        self._idle.clear()
        return run

    def finish(self, run: Run) -> None:
        if run in self.running:
            self.running.discard(run)
            self._kv_tokens -= run.kv_tokens
        if not self.running:
            self._idle.set()

    async def advance(self, run: Run, fraction: float) -> bool:
        """Let `run` accumulate `fraction` of its generation time. False once aborted."""
        latency = self.config.latency_s
        target = latency * fraction
        loop = asyncio.get_running_loop()
        while True:
            if run.aborted or run.epoch != self._epoch:
                run.aborted = True
                return False
            if self.paused and self.pause_mode == "keep":
                await self._wait_changed(HOLD_POLL_S)  # frozen: no progress until resume
                continue
            if run.versions[-1][0] != self.weight_version:
                run.versions.append((self.weight_version, run.active_s / latency if latency else 0))
            if run.active_s >= target:
                return True
            changed = self._changed
            run.since = loop.time()
            try:
                async with asyncio.timeout(target - run.active_s):
                    await changed.wait()
            except TimeoutError:
                pass
            finally:
                run.active_s += loop.time() - run.since
                run.since = None

    def progress(self, run: Run) -> float:
        """Fraction of the run's generation time done so far (live while generating)."""
        latency = self.config.latency_s
        if not latency:
            return 0.0
        active = run.active_s
        if run.since is not None:
            active += asyncio.get_running_loop().time() - run.since
        return min(active / latency, 1.0)

    # -- control plane -------------------------------------------------------------------

    async def pause(self, mode: str, timeout_s: float) -> None:
        self.paused = True
        self.pause_mode = mode
        if mode == "abort":
            self._epoch += 1  # every run started before now is aborted
        self._notify()
        if mode in ("abort", "wait"):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()

    def resume(self) -> None:
        self.paused = False
        self.pause_mode = None
        self._notify()

    def abort(self, engine_ids: list[str] | None, *, prefix: bool = False) -> int:
        """Abort the runs owning any of `engine_ids` (all runs when None/empty); with
        `prefix`, an id matches every engine id it starts (SGLang's `rid` matching)."""
        wanted = set(engine_ids or ())
        if prefix:
            hit = [
                r
                for r in self.running
                if not wanted or any(e.startswith(w) for e in r.engine_ids for w in wanted)
            ]
        else:
            hit = [r for r in self.running if not wanted or r.engine_ids & wanted]
        for run in hit:
            run.aborted = True
        self._notify()
        return len(hit)

    def set_weight_version(self, version: str) -> None:
        self.weight_version = version
        self._notify()

    # -- observation ---------------------------------------------------------------------

    def record(self, entry: dict[str, Any]) -> None:
        if self.config.request_log_size:
            self.log.append(entry)

    def kv_usage(self) -> float:
        return min(self._kv_tokens / self.config.kv_cache_tokens, 1.0)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_changed(self, timeout_s: float) -> None:
        changed = self._changed
        try:
            async with asyncio.timeout(timeout_s):
                await changed.wait()
        except TimeoutError:
            pass
