"""The weight-sync barrier: one gate in front of every generation call to every backend.

`pause` closes the gate (no new generation is dispatched anywhere) and then, by mode:
- `wait`: returns once no generation is in flight;
- `abort`: aborts in-flight generations; the session keeps whatever tokens the backend
  returned (vLLM 0.33 answers an aborted request with its partial tokens) and continues the
  same turn from prompt + partial tokens after `resume`;
- `keep`: in-flight generations stay parked in the backends (vLLM `mode=keep`) and finish
  after `resume`.
`resume` sets the new policy version and reopens the gate. Tool calls, sandboxes and
tokenization are not gated: rollouts keep working while generation is paused.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from agentroll.server.errors import ServerError
from agentroll.server.schema import PauseMode

T = TypeVar("T")


class GenerationAborted(ServerError):
    """A generation call was aborted by a pause before the backend answered."""


@dataclass(eq=False)
class Flight:
    """One generation call in flight."""

    policy_version: int
    epoch: int
    backend_id: str | None = None
    call: "asyncio.Future[object] | None" = None
    aborted: bool = False
    started: float = field(default_factory=time.monotonic)

    async def run(self, call: Awaitable[T]) -> T:
        """Await the backend call; a pause in `abort` mode cancels it (nothing else)."""
        future: asyncio.Future[T] = asyncio.ensure_future(call)
        self.call = future  # type: ignore[assignment]
        try:
            return await future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.aborted and future.cancelled() and task is not None and not task.cancelling():
                raise GenerationAborted("generation aborted by a pause") from None
            future.cancel()
            raise


@dataclass
class GateLoad:
    """What passed the gate: answered generation calls and their tokens."""

    generations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def record(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.generations += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens


@dataclass
class PauseState:
    paused: bool
    mode: PauseMode | None
    policy_version: int
    in_flight: int


class GenerationGate:
    def __init__(self, policy_version: int = 0) -> None:
        self.policy_version = policy_version
        self.mode: PauseMode | None = None
        self.epoch = 0
        """Incremented by every pause: a flight from an older epoch lived through one."""
        self._open = asyncio.Event()
        self._open.set()
        self._flights: set[Flight] = set()
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._last_keep_epoch = -1
        self.waiting = 0
        """Generation calls held back by the pause now."""
        self.load = GateLoad()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    def state(self) -> PauseState:
        return PauseState(self.paused, self.mode, self.policy_version, self.in_flight)

    @contextlib.asynccontextmanager
    async def dispatch(self) -> AsyncIterator[Flight]:
        """Hold a generation slot; waits while paused (bounded by the job's own deadline)."""
        if not self._open.is_set():
            self.waiting += 1
            try:
                while not self._open.is_set():
                    await self._open.wait()
            finally:
                self.waiting -= 1
        flight = Flight(self.policy_version, self.epoch)
        self._flights.add(flight)
        self._quiet.clear()
        try:
            yield flight
        finally:
            self._flights.discard(flight)
            if not self._flights:
                self._quiet.set()

    def close(self, mode: PauseMode) -> None:
        """Stop dispatching. In-flight calls are untouched: see `abort_in_flight`."""
        self._open.clear()
        self.mode = mode
        self.epoch += 1
        if mode == "keep":
            self._last_keep_epoch = self.epoch

    def kept_since(self, epoch: int) -> bool:
        """Whether a `keep` pause happened after `epoch` (calls then span a weight update)."""
        return self._last_keep_epoch > epoch

    def abort_in_flight(self, spare: frozenset[str] = frozenset()) -> None:
        """Cancel the calls still in flight, except on the `spare` backends: those aborted
        their requests themselves and are sending back the partial tokens to keep."""
        for flight in self._flights:
            if flight.backend_id in spare:
                continue
            flight.aborted = True
            if flight.call is not None and not flight.call.done():
                flight.call.cancel()

    async def wait_quiet(self, timeout_s: float) -> bool:
        """True once nothing is in flight; False if `timeout_s` passed first."""
        try:
            await asyncio.wait_for(self._quiet.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def open(self, policy_version: int) -> None:
        self.policy_version = policy_version
        self.mode = None
        self._open.set()
