"""Admission that fits the node: a job starts INIT only while the node has room for it.

Starting more sandboxes than a node can serve only makes every rollout slower, until tool
calls and stages time out: load would be shed by failing rollouts. Here it is shed by
queueing. Before a job's INIT, the node is read (cheap `/proc` reads, at most every
`SAMPLE_INTERVAL_S`) and the job waits while

- **memory**: less than `memory_reserve` of the node's memory is available;
- **pids**: the node's threads are above `pids_ceiling` of what the kernel allows;
- **cpu**: tasks waited for a CPU more than `cpu_pressure_max` % of the last 10 s (PSI,
  `/proc/pressure/cpu`; the 1-minute load per CPU where the kernel has no PSI) *and* at least
  `starts_when_busy` jobs (default: one per CPU) are already in INIT — a saturated node keeps
  starting a few rollouts, never a flood.

The configured pools still apply on top. The wait is the job's INIT queue time, and the
reasons jobs wait are in `GET /v1/status` (`admission`) and the metrics. When nothing is in
any stage the next job is admitted whatever the readings say: something else is loading the
node, and waiting would not free it.
"""

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SAMPLE_INTERVAL_S = 0.5
RECHECK_S = 0.25


class AdmissionSettings(BaseModel):
    """When INIT waits for the node (see `agentroll.server.admission`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
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
        description="CPU pressure (% of the last 10 s tasks waited for a CPU) that makes the "
        "node busy: then only `starts_when_busy` jobs may be in INIT.",
    )
    starts_when_busy: int | None = Field(
        None, ge=1, description="Jobs in INIT at once on a busy node (default: one per CPU)."
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


def read_node() -> NodeReading:
    """The node's CPU pressure, memory and threads, from `/proc` (a few small reads)."""
    cpus = os.cpu_count() or 1
    loadavg = Path("/proc/loadavg").read_text().split()
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        pressure = float(some[1].removeprefix("avg10="))
    except (OSError, IndexError, ValueError):
        pressure = min(100.0, 100.0 * float(loadavg[0]) / cpus)
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
    )


class NodeAdmission:
    """The gate in front of INIT. `admit()` waits until the node has room for one more job."""

    def __init__(
        self,
        settings: AdmissionSettings,
        *,
        sample: Callable[[], NodeReading] = read_node,
        cpus: int | None = None,
    ) -> None:
        self.settings = settings
        self._sample = sample
        self._starts_when_busy = settings.starts_when_busy or cpus or os.cpu_count() or 1
        self._reading: NodeReading | None = None
        self._read_at = -SAMPLE_INTERVAL_S
        self.waiting: Counter[str] = Counter()
        """Jobs waiting now, by the reason they wait."""

    @property
    def reading(self) -> NodeReading:
        now = time.monotonic()
        if self._reading is None or now - self._read_at >= SAMPLE_INTERVAL_S:
            self._reading, self._read_at = self._sample(), now
        return self._reading

    def refusal(self, starting: int) -> str | None:
        """Why one more job may not start INIT now (`starting`: jobs in INIT), or None."""
        s, node = self.settings, self.reading
        if node.memory_available < s.memory_reserve * node.memory_total:
            return "memory"
        if node.threads > s.pids_ceiling * node.threads_max:
            return "pids"
        if node.cpu_pressure > s.cpu_pressure_max and starting >= self._starts_when_busy:
            return "cpu"
        return None

    async def admit(self, starting: Callable[[], int], idle: Callable[[], bool]) -> None:
        """Wait until the node has room (or nothing runs at all); cancellable at any point."""
        if not self.settings.enabled:
            return
        reason = self.refusal(starting())
        while reason is not None and not idle():
            self.waiting[reason] += 1
            try:
                await asyncio.sleep(RECHECK_S)
            finally:
                self.waiting[reason] -= 1
            reason = self.refusal(starting())
