"""The soak benchmark's records and figures: what `soak.py` measures, and how it is judged.

Kept apart from the workload in `soak.py` so each stays readable; both run as scripts from
`benchmarks/` (the CI test puts that folder on the import path).
"""

import math
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentroll.server.schema import Trajectory

FAMILIES = ("code", "swe", "math", "stem")
STAGES = ("init", "run", "eval")


@dataclass
class SoakConfig:
    duration_s: float = 1800.0
    concurrency: int = 256
    latency_s: float = 0.3
    pause_every_s: float = 60.0
    pause_hold_s: float = 1.0
    churn_every_s: float = 45.0
    sample_every_s: float = 5.0
    warmup_fraction: float = 0.2
    windows: int = 6
    families: tuple[str, ...] = FAMILIES
    drain_timeout_s: float = 600.0
    workdir: Path | None = None


@dataclass
class Sample:
    t: float
    finished: int
    rss_mb: float
    fds: int
    threads: int
    sandboxes: int
    in_flight: int


@dataclass
class SoakReport:
    submitted: int = 0
    received: int = 0
    duplicates: int = 0
    lost: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    error_types: Counter[str] = field(default_factory=Counter)
    infra_with_reward: int = 0
    samples: list[Sample] = field(default_factory=list)
    finished_at: list[tuple[float, Trajectory]] = field(default_factory=list)
    pauses: int = 0
    churns: int = 0
    idle_fds_before: int = 0
    idle_fds_after: int = 0
    idle_backend_conns: int = 0
    leaked_children: list[int] = field(default_factory=list)
    leaked_sandbox_procs: list[int] = field(default_factory=list)
    leftover_leases: list[str] = field(default_factory=list)
    leftover_sandbox_dirs: list[str] = field(default_factory=list)
    server_exit_code: int | None = None
    server_died_at_s: float | None = None
    """Set when the server process ended on its own during the run (a crash)."""
    warmup_end_s: float = 0.0
    elapsed_s: float = 0.0


# -- figures --------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stage_s(t: Trajectory, stage: str) -> float | None:
    timing = getattr(t.timing, stage)
    return None if timing is None else timing.queue_s + timing.work_s


def windows(report: SoakReport, duration_s: float, n: int) -> Iterator[dict[str, float]]:
    """Per time window: throughput and p50/p99 per stage (queue + work) and per rollout."""
    width = duration_s / n
    for k in range(n):
        lo, hi = k * width, (k + 1) * width
        done = [t for at, t in report.finished_at if lo <= at < hi]
        row: dict[str, float] = {"from_s": lo, "to_s": hi, "per_min": 60 * len(done) / width}
        for stage in STAGES:
            values = [v for t in done if (v := _stage_s(t, stage)) is not None]
            row[f"{stage}_p50"], row[f"{stage}_p99"] = _pct(values, 0.5), _pct(values, 0.99)
        totals = [t.timing.total_s for t in done]
        row["total_p50"], row["total_p99"] = _pct(totals, 0.5), _pct(totals, 0.99)
        samples = [s for s in report.samples if lo <= s.t < hi]
        row["rss_mb"] = statistics.median(s.rss_mb for s in samples) if samples else float("nan")
        row["fds"] = max((s.fds for s in samples), default=0)
        row["sandboxes"] = max((s.sandboxes for s in samples), default=0)
        yield row


def rss_growth(report: SoakReport) -> float:
    """Server RSS at the end of the run vs. right after warm-up (medians of 5 samples)."""
    after = [s for s in report.samples if s.t >= report.warmup_end_s]
    if len(after) < 10:
        return float("nan")
    start = statistics.median(s.rss_mb for s in after[:5])
    end = statistics.median(s.rss_mb for s in after[-5:])
    return 100 * (end - start) / start


def p99_drift(rows: list[dict[str, float]], warmup_end_s: float) -> float:
    """Worst ratio, over stages, of last-window p99 to first post-warm-up window p99."""
    after = [r for r in rows if r["from_s"] >= warmup_end_s - 1e-9]
    if len(after) < 2:
        return float("nan")
    first, last = after[0], after[-1]
    ratios = [
        last[f"{s}_p99"] / first[f"{s}_p99"]
        for s in (*STAGES, "total")
        if first[f"{s}_p99"] > 0.05 and not math.isnan(last[f"{s}_p99"])  # no 0/0 for math EVAL
    ]
    return max(ratios, default=float("nan"))


def _line(name: str, value: str, target: str, ok: bool) -> None:
    print(f"  {name:<44} {value:>14}   target {target:<12} {'ok' if ok else 'MISSES'}")


def print_report(cfg: SoakConfig, r: SoakReport) -> None:
    if r.server_died_at_s is not None:
        print(
            f"soak: THE SERVER DIED after {r.server_died_at_s:.0f} s (exit code "
            f"{r.server_exit_code}; see its log); {r.received} results received, "
            f"{len(r.lost)} in flight lost with it"
        )
    rows = list(windows(r, cfg.duration_s, cfg.windows))
    print(
        f"soak: {cfg.duration_s:.0f} s, {cfg.concurrency} rollouts in flight "
        f"({', '.join(cfg.families)}; bubblewrap sandboxes; {cfg.latency_s * 1000:.0f} ms per LLM "
        f"call), {r.pauses} pause/resume cycles, {r.churns} backend churns"
    )
    print(f"  outcomes {dict(r.outcomes)}; error types {dict(r.error_types)}")
    print("  window          rollouts/min  init p50/p99   run p50/p99    eval p50/p99   "
          "total p50/p99   RSS MB  fds  sandboxes")  # fmt: skip
    for w in rows:
        print(
            f"  {w['from_s']:5.0f}-{w['to_s']:5.0f} s  {w['per_min']:10.1f}  "
            f"{w['init_p50']:5.2f}/{w['init_p99']:6.2f}  {w['run_p50']:5.2f}/{w['run_p99']:6.2f}"
            f"  {w['eval_p50']:5.2f}/{w['eval_p99']:6.2f}  "
            f"{w['total_p50']:6.2f}/{w['total_p99']:6.2f}  {w['rss_mb']:7.1f} {w['fds']:4.0f}"
            f"  {w['sandboxes']:5.0f}"
        )
    growth, drift = rss_growth(r), p99_drift(rows, r.warmup_end_s)
    lost = len(r.lost) + r.duplicates
    leaked = len(r.leaked_children) + len(r.leaked_sandbox_procs) + len(r.leftover_leases)
    fd_delta = r.idle_fds_after - r.idle_fds_before
    _line("submitted / received once", f"{r.submitted}/{r.received}", "equal", not lost)
    _line("lost or duplicated results", str(lost), "0", not lost)
    infra = r.outcomes.get("infra_error", 0)
    _line("infra_error (pauses, churn: not faults)", str(infra), "0", not infra)
    _line("infra_error with a reward", str(r.infra_with_reward), "0", not r.infra_with_reward)
    _line("leaked processes and leases (idle)", str(leaked), "0", not leaked)
    _line("sandbox dirs left after shutdown", str(len(r.leftover_sandbox_dirs)), "0",
          not r.leftover_sandbox_dirs)  # fmt: skip
    _line("server fds idle: after - before", f"{fd_delta:+d}", "<= 0", fd_delta <= 0)
    print(f"  (not counted: {r.idle_backend_conns} pooled keep-alive connections to backends)")
    _line("server RSS growth after warm-up", f"{growth:+.1f} %", "<= 5 %", growth <= 5)
    _line("p99 last window / first after warm-up", f"{drift:.2f}x", "<= 1.20x", drift <= 1.2)
    # uvicorn re-raises SIGTERM once its graceful shutdown is done: -15 is a clean exit
    clean_exit = r.server_exit_code in (0, -15)
    _line("server exit after SIGTERM", str(r.server_exit_code), "0 or -15", clean_exit)
