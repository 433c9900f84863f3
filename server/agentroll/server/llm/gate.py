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
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from agentroll.server.errors import GenerationAborted
from agentroll.server.schema import PauseMode

T = TypeVar("T")


@dataclass(eq=False)
class Flight:
    """One generation call in flight."""

    policy_version: int
    epoch: int
    updates: int = 0
    """How many versions the gate had announced when the call was dispatched."""
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
        self.updates = 0
        """Versions announced so far: a call answered after one may hold new weights' tokens."""
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
        flight = Flight(self.policy_version, self.epoch, self.updates)
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

    def stamp(
        self, flight: Flight, n: int, spans: Sequence[tuple[str, int, int]] | None
    ) -> list[tuple[int, int, int]] | None:
        """(policy version, start, end) over the `n` tokens a flight's call returned; None when
        it cannot be told which weights sampled which of them.

        A call answered before any version was announced since its dispatch sampled with the
        weights it was dispatched under (an engine cut at a pause answers before the resume).
        Otherwise it may have lived through a weight update, and the engine's own spans (vLLM 0.33
        `weight_versions`) decide: a span labelled with a version between the call's and
        the gate's is that version, so a call that sampled nothing before the update is
        stamped with the new one; spans with other labels are placed by position (the
        first old, a second new)."""
        old = flight.policy_version
        if n == 0 or self.updates == flight.updates:
            return [(old, 0, n)]
        kept = [(label, lo, hi) for label, lo, hi in spans or () if hi > lo]
        if (
            not kept
            or kept[0][1] != 0
            or kept[-1][2] != n
            or any(a[2] != b[1] for a, b in itertools.pairwise(kept))
        ):
            return None
        ranges: list[tuple[int, int, int]] = []
        for i, (label, lo, hi) in enumerate(kept):
            version = _engine_version(label, old, self.policy_version)
            if version is None:
                if len(kept) != 2:
                    return None
                version = (old, self.policy_version)[i]
            if ranges and ranges[-1][0] == version:
                ranges[-1] = (version, ranges[-1][1], hi)
            else:
                ranges.append((version, lo, hi))
        if any(a[0] > b[0] for a, b in itertools.pairwise(ranges)):
            return None  # weights never go back in time: the labels are not ours
        return ranges

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

    def announce(self, policy_version: int) -> None:
        """Put `policy_version` in force before any backend resumes (the gate may still be
        closed): whichever backend answers first, its new tokens carry it."""
        self.policy_version = policy_version
        self.updates += 1

    def open(self, policy_version: int) -> None:
        self.policy_version = policy_version
        self.mode = None
        self._open.set()


def _engine_version(label: str, oldest: int, newest: int) -> int | None:
    """The policy version an engine's weight label names, if it is one in [oldest, newest]
    (a trainer that labels the engine with `str(policy_version)`, as
    `trainer_clients.weights` does)."""
    if not label.isdecimal():
        return None
    version = int(label)
    return version if oldest <= version <= newest else None
