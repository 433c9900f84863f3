"""What a GRPO group is to the collector: its spec, its result, and the running tally.

A group is n samples of one prompt. The collector hands a group back only whole (`valid`,
exactly n usable trajectories) or explicitly `valid=False` with the reason: never short, so
a missing sample can never silently skew the group's baseline.
"""

import bisect
import hashlib
import statistics
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from agentroll.server.schema import JobRequest, Trajectory
from agentroll.trainer_clients.samples import MAIN_ONLY, ChainSelection, samples

MAX_ID = 128  # the server's IDENTIFIER pattern allows at most 128 characters


def sample_job_id(group_id: str, sample: int, attempt: int) -> str:
    """`<group>-s<k>-r<attempt>`: deterministic, so a crashed trainer resubmits the same ids.

    Over-long group ids are shortened with a hash so the id stays within 128 characters.
    """
    suffix = f"-s{sample}-r{attempt}"
    if len(group_id) + len(suffix) > MAX_ID:
        digest = hashlib.sha1(group_id.encode()).hexdigest()[:12]
        group_id = f"{group_id[: MAX_ID - len(suffix) - 13]}.{digest}"
    return group_id + suffix


@dataclass(frozen=True)
class GroupSpec:
    """n samples of `request` (a template: `job_id` and `group_id` are set per sample).

    If the template's sampling has a `seed`, sample k uses `seed + k` (a retry of sample k
    keeps its seed), so the samples of a group differ.
    """

    group_id: str
    request: JobRequest
    n: int
    task_id: str | None = None
    """The task's stable id (the same across runs), for per-task records such as the
    curriculum's pass rates; carried to the finished `Group`."""

    def sample(self, index: int, attempt: int) -> JobRequest:
        """Sample `index`'s request for its `attempt`-th try (its seed offset by `index`)."""
        sampling = self.request.sampling
        if sampling.seed is not None:
            sampling = sampling.model_copy(update={"seed": sampling.seed + index})
        return self.request.model_copy(
            update={
                "job_id": sample_job_id(self.group_id, index, attempt),
                "group_id": self.group_id,
                "sampling": sampling,
            }
        )


@dataclass
class Group:
    """A finished group. Train on it only if `valid`; then `trajectories` has exactly n."""

    group_id: str
    n: int
    valid: bool
    trajectories: list[Trajectory]
    """Usable samples in sample order (fewer than n only when not valid)."""
    reason: str | None = None
    """Why the group is invalid."""
    zero_variance: bool = False
    """All rewards equal: GRPO's group-normalised advantage is zero for every sample."""
    stale: list[str] = field(default_factory=list)
    """Job ids kept although their policy lag exceeds the bound (stale="flag")."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Tries not used, by cause (`infra_error`, `timed_out`, `masked`, `stale`, ...)."""
    jobs_submitted: int = 0
    elapsed_s: float = 0.0
    task_id: str | None = None
    """The spec's `task_id`."""

    @property
    def rewards(self) -> list[float]:
        """The usable samples' rewards, in sample order (a missing reward counts as 0)."""
        return [t.reward if t.reward is not None else 0.0 for t in self.trajectories]

    def samples(self, chains: ChainSelection = MAIN_ONLY) -> list[Trajectory]:
        """The usable samples' chosen token chains, in sample order, each a trajectory of its
        own with its episode's reward (`agentroll.trainer_clients.samples`); `rewards` and
        `zero_variance` stay per episode."""
        return [s for t in self.trajectories for s in samples(t, chains)]


@dataclass
class DynamicSamplingStats:
    """The cost of dynamic sampling: groups generated (decided) against groups kept."""

    batches: int = 0
    groups_generated: int = 0
    groups_kept: int = 0
    dropped_zero_variance: int = 0
    dropped_invalid: int = 0
    rollouts_spent: int = 0
    """Tries submitted for every group generated, kept or not (retries included)."""
    rollouts_kept: int = 0
    """Samples in the groups kept."""
    resampled_stale: int = 0
    """Groups that waited for their turn, were stale by then, and were sampled again."""
    shortfalls: int = 0
    """Batches that could not be filled (the stream ran out, or the refill cap was hit)."""

    def as_dict(self) -> dict[str, Any]:
        """Flat counters, prefixed `dynamic_`, and the fraction of generated groups kept."""
        out = {f"dynamic_{name}": value for name, value in vars(self).items()}
        generated = self.groups_generated
        out["dynamic_kept_fraction"] = round(self.groups_kept / generated, 4) if generated else 0.0
        return out


@dataclass
class CollectorStats:
    """Running counters a trainer can log (`as_dict()` is flat and JSON-friendly)."""

    started: float = field(default_factory=time.monotonic)
    groups_submitted: int = 0
    groups_valid: int = 0
    groups_invalid: int = 0
    zero_variance: int = 0
    jobs_submitted: int = 0
    samples_used: int = 0
    retries: int = 0
    stale_dropped: int = 0
    stale_flagged: int = 0
    extras_cancelled: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    group_seconds: list[float] = field(default_factory=list)
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    """`timing.total_s` of the last finished tries, the reference for `unused_by_quartile`."""
    unused_by_outcome: Counter[str] = field(default_factory=Counter)
    """Finished tries not trained on (retried, in an invalid or stale group), by outcome."""
    unused_seconds: list[float | None] = field(default_factory=list)
    """Their durations (None: cancelled before it finished)."""
    dynamic: DynamicSamplingStats = field(default_factory=DynamicSamplingStats)
    """What filling batches with dynamic sampling cost (`AsyncDynamicSampler`)."""

    def note_finished(self, trajectory: Trajectory) -> None:
        """A finished try: its duration joins the reference for `unused_by_quartile`."""
        self.durations.append(trajectory.timing.total_s)

    def note_unused(self, outcome: str, seconds: float | None) -> None:
        """A try that will not be trained on: what a trainer's data loses, by kind."""
        self.unused_by_outcome[outcome] += 1
        self.unused_seconds.append(seconds)

    def unused_by_quartile(self) -> dict[str, int]:
        """Unused tries by the quartile of their duration among all finished tries (q4: the
        slowest quarter); `unfinished`: cancelled or expired before they finished. Skewed
        to q4, the data kept is biased towards fast rollouts."""
        ranked = sorted(self.durations)
        out = {"q1": 0, "q2": 0, "q3": 0, "q4": 0, "unfinished": 0}
        for seconds in self.unused_seconds:
            if seconds is None or not ranked:
                out["unfinished"] += 1
                continue
            rank = bisect.bisect_left(ranked, seconds) / len(ranked)
            out[f"q{min(int(rank * 4), 3) + 1}"] += 1
        return out

    @property
    def groups_pending(self) -> int:
        """Groups submitted and not finished yet."""
        return self.groups_submitted - self.groups_valid - self.groups_invalid

    def as_dict(self) -> dict[str, Any]:
        """The counters and derived rates as one flat, JSON-friendly dict."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        done = self.groups_valid + self.groups_invalid
        return {
            "groups_submitted": self.groups_submitted,
            "groups_valid": self.groups_valid,
            "groups_invalid": self.groups_invalid,
            "groups_pending": self.groups_pending,
            "groups_per_s": round(self.groups_valid / elapsed, 3),
            "zero_variance_groups": self.zero_variance,
            "jobs_submitted": self.jobs_submitted,
            "samples_used": self.samples_used,
            "retries": self.retries,
            "stale_dropped": self.stale_dropped,
            "stale_flagged": self.stale_flagged,
            "extras_cancelled": self.extras_cancelled,
            **{f"dropped_{cause}": count for cause, count in sorted(self.dropped.items())},
            **{f"unused_{o}": count for o, count in sorted(self.unused_by_outcome.items())},
            **{f"unused_{q}": count for q, count in self.unused_by_quartile().items()},
            **self.dynamic.as_dict(),
            "invalid_fraction": round(self.groups_invalid / done, 4) if done else 0.0,
            "mean_group_s": round(statistics.fmean(self.group_seconds), 3)
            if self.group_seconds
            else 0.0,
        }
