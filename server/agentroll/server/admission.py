"""Admission that fits the node: a job starts INIT only while the node has room for it.

Starting more sandboxes than a node can serve only makes every rollout slower, until tool
calls and stages time out: load would be shed by failing rollouts. Here it is shed by
queueing. Before a job's INIT, the node is read (cheap `/proc` reads, at most every
`SAMPLE_INTERVAL_S`) and the job waits while

- **memory**: less than `memory_reserve` of the node's memory is available;
- **pids**: the node's threads are above `pids_ceiling` of what the kernel allows;
- **cpu**: the node is busy — tasks waited for a CPU more than `cpu_pressure_max` % of the
  time since the previous reading (PSI, `/proc/pressure/cpu`; the 1-minute load per CPU where
  the kernel has no PSI) — and at least `starts_when_busy` jobs (default: one per CPU) are
  already in INIT, so a saturated node keeps starting a few rollouts, never a flood; or the
  live rollouts (admitted and not yet finished) have reached `live_limit`.

`live_limit` is the node's measured capacity. Past a point, more live rollouts on a CPU-bound
node add no throughput, only latency (the same work is shared by more of them: every tool call
waits longer for a CPU). So the limit adapts to CPU pressure at each reading: while the node
has been busy for a while (PSI's 10 s average above `cpu_pressure_max`: a sandbox start is a
blip, not saturation) it drops to `LIVE_DECREASE` of the smaller of itself and the rollouts
live, never below `live_when_busy` (default four per CPU); while the node is not busy now and
the limit is what holds jobs back, it grows by `LIVE_INCREASE`. It starts at the floor, so a
burst of jobs is let in as the node shows room for it, not all at once. A node whose rollouts
mostly wait for their LLM shows no pressure, and its limit grows to whatever the pools allow.
"CPUs" are those this process may run on (its affinity: a Slurm allocation, a cpuset).

The configured pools still apply on top. The wait is the job's INIT queue time, and the
reasons jobs wait are in `GET /v1/status` (`admission`) and the metrics. When nothing is in
any stage the next job is admitted whatever the readings say: something else is loading the
node, and waiting would not free it.
"""

import asyncio
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SAMPLE_INTERVAL_S = 0.5
RECHECK_S = 0.25
LIVE_DECREASE = 0.8
LIVE_INCREASE = 1.25
LIVE_PER_CPU_WHEN_BUSY = 4


class AdmissionSettings(BaseModel):
    """When INIT waits for the node (see `agentroll.server.admission`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Off: INIT never waits for the node.")
    memory_reserve: float = Field(
        0.10, ge=0, le=0.9, description="Fraction of the node's memory kept available."
    )
    pids_ceiling: float = Field(
        0.85, gt=0, le=1, description="Fraction of the kernel's thread limit the node may use."
    )
    cpu_pressure_max: float = Field(
        80.0,
        gt=0,
        le=100,
        description="CPU pressure (% of the time tasks waited for a CPU) that makes the node "
        "busy: then only `starts_when_busy` jobs may be in INIT, and the live limit shrinks.",
    )
    starts_when_busy: int | None = Field(
        None, ge=1, description="Jobs in INIT at once on a busy node (default: one per CPU)."
    )
    live_when_busy: int | None = Field(
        None,
        ge=1,
        description="Live rollouts a busy node still keeps: the floor of the adaptive live "
        "limit (default: four per CPU).",
    )


@dataclass(frozen=True, slots=True)
class NodeReading:
    cpu_pressure: float
    """% of the last 10 s that runnable tasks waited for a CPU (PSI `some avg10`), or the
    1-minute load per CPU scaled to % where the kernel has no PSI."""
    memory_available: int
    memory_total: int
    threads: int
    threads_max: int
    cpu_wait_us: int | None = None
    """PSI `some total`: µs runnable tasks have waited for a CPU since boot (None: no PSI)."""


def read_node() -> NodeReading:
    """The node's CPU pressure, memory and threads, from `/proc` (a few small reads)."""
    cpus = os.cpu_count() or 1
    loadavg = Path("/proc/loadavg").read_text().split()
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        pressure = float(some[1].removeprefix("avg10="))
        wait_us: int | None = int(some[4].removeprefix("total="))
    except (OSError, IndexError, ValueError):
        pressure, wait_us = min(100.0, 100.0 * float(loadavg[0]) / cpus), None
    meminfo = dict(
        (line.split(":")[0], int(line.split()[1]) * 1024)
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith(("MemTotal:", "MemAvailable:"))
    )
    threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return NodeReading(
        cpu_pressure=pressure,
        memory_available=meminfo["MemAvailable"],
        memory_total=meminfo["MemTotal"],
        threads=int(loadavg[3].split("/")[1]),
        threads_max=min(threads_max, pid_max),
        cpu_wait_us=wait_us,
    )


def pressure_between(before: NodeReading | None, after: NodeReading, seconds: float) -> float:
    """CPU pressure over the `seconds` between two readings, from PSI's running total: an
    admission decision must see the sandboxes it just started, not a 10 s average of the
    past. The reading's own figure where there is no earlier one or no PSI."""
    if before is None or before.cpu_wait_us is None or after.cpu_wait_us is None or seconds <= 0:
        return after.cpu_pressure
    waited_s = (after.cpu_wait_us - before.cpu_wait_us) / 1e6
    return min(100.0, max(0.0, 100.0 * waited_s / seconds))


class NodeAdmission:
    """The gate in front of INIT. `admit()` waits until the node has room for one more job;
    each reading it takes moves `live_limit` (see the module's doc)."""

    def __init__(
        self,
        settings: AdmissionSettings,
        *,
        sample: Callable[[], NodeReading] = read_node,
        cpus: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._sample = sample
        self._clock = clock
        cpus = cpus or len(os.sched_getaffinity(0)) or 1
        self._starts_when_busy = settings.starts_when_busy or cpus
        self._live_floor = settings.live_when_busy or LIVE_PER_CPU_WHEN_BUSY * cpus
        self.live_limit = self._live_floor
        """Live rollouts the node has room for now (measured; see the module's doc)."""
        self.cpu_pressure = 0.0
        """% of the time between the last two readings that tasks waited for a CPU."""
        self._reading: NodeReading | None = None
        self._read_at = -SAMPLE_INTERVAL_S
        self._limit_moved_at = self._read_at
        self._line: deque[asyncio.Event] = deque()
        """Jobs waiting, in arrival order; the head's event is set: it is its turn to check."""
        self._holding: str | None = None
        """Why the head of the line waits."""

    @property
    def reading(self) -> NodeReading:
        now = self._clock()
        if self._reading is None or now - self._read_at >= SAMPLE_INTERVAL_S:
            reading = self._sample()
            self.cpu_pressure = pressure_between(self._reading, reading, now - self._read_at)
            self._reading, self._read_at = reading, now
        return self._reading

    @property
    def busy(self) -> bool:
        return self.cpu_pressure > self.settings.cpu_pressure_max

    def refusal(self, starting: int, live: int) -> str | None:
        """Why one more job may not start INIT now (`starting`: jobs in INIT, `live`: jobs
        admitted and not finished), or None."""
        s, node = self.settings, self.reading
        self._move_live_limit(node, live)
        if node.memory_available < s.memory_reserve * node.memory_total:
            return "memory"
        if node.threads > s.pids_ceiling * node.threads_max:
            return "pids"
        if (self.busy and starting >= self._starts_when_busy) or live >= self.live_limit:
            return "cpu"
        return None

    def _move_live_limit(self, node: NodeReading, live: int) -> None:
        """Once per reading: shrink towards what runs while the node stays busy (`node`'s
        10 s average), grow while the limit, not the node, is what holds jobs back."""
        if self._limit_moved_at == self._read_at:
            return
        self._limit_moved_at = self._read_at
        if node.cpu_pressure > self.settings.cpu_pressure_max:
            shrunk = int(min(self.live_limit, live) * LIVE_DECREASE)
            self.live_limit = max(self._live_floor, shrunk)
        elif not self.busy and live >= self.live_limit:
            self.live_limit = max(self.live_limit + 1, int(self.live_limit * LIVE_INCREASE))

    async def admit(
        self, starting: Callable[[], int], live: Callable[[], int], idle: Callable[[], bool]
    ) -> None:
        """Wait until the node has room (or nothing runs at all); cancellable at any point.
        First come, first admitted: only the job at the head of the line checks, so a job
        is never overtaken by one that arrived later (which could starve it)."""
        if not self.settings.enabled:
            return
        if not self._line and self._room(starting(), live(), idle):
            return
        turn = asyncio.Event()
        self._line.append(turn)
        self._line[0].set()
        try:
            await turn.wait()
            # polled: the node's readings change with nothing here to signal it
            while not self._room(starting(), live(), idle):  # noqa: ASYNC110
                await asyncio.sleep(RECHECK_S)
        finally:
            self._line.remove(turn)
            if self._line:
                self._line[0].set()
            else:
                self._holding = None

    def _room(self, starting: int, live: int, idle: Callable[[], bool]) -> bool:
        reason = self.refusal(starting, live)
        self._holding = None if reason is None or idle() else reason
        return self._holding is None

    @property
    def waiting(self) -> Counter[str]:
        """Jobs waiting now, by the reason they wait (the one the head of the line waits for)."""
        if not self._line or self._holding is None:
            return Counter()
        return Counter({self._holding: len(self._line)})
