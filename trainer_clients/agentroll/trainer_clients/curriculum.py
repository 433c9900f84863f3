"""A curriculum from per-task pass rates the trainer keeps across restarts.

`PassRates` records, per stable task id, how many samples were tried and how many passed
(reward >= `pass_threshold`), in a small JSON file the trainer owns (written atomically after
each record, read back on start). `CurriculumSampler` draws task ids weighted by the band
their pass rate falls in: by default tasks being learned (passed sometimes) are drawn four
times as often as tasks never passed, and ten times as often as tasks always passed; a task
not seen yet (fewer than `min_samples`) gets the neutral weight. The same seed over the same
records draws the same tasks.

    rates = PassRates("run42/pass_rates.json")
    curriculum = CurriculumSampler(rates, task_ids, seed=0)
    specs = curriculum.stream(lambda task: requests[task], n=8, id_prefix="step-0-")
    batch = await AsyncDynamicSampler(collector, specs).next_batch(16)
    rates.record_groups(batch.groups + batch.dropped)

Only valid groups are recorded: an invalid group's samples are the ones that happened to
finish, and would bias the rate towards whatever finishes.
"""

import json
import math
import os
import random
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentroll.server.schema import JobRequest
from agentroll.trainer_clients.groups import Group, GroupSpec

FORMAT = "agentroll.pass_rates.v1"


@dataclass
class TaskRecord:
    """One task's tally (decayed counts once `decay` < 1)."""

    samples: float = 0.0
    passed: float = 0.0

    @property
    def pass_rate(self) -> float:
        """Fraction of its samples that passed (0.0 before any)."""
        return self.passed / self.samples if self.samples else 0.0


class PassRates:
    """Per-task pass rates, persisted to `path` (JSON).

    `decay` < 1 weighs older records down (each new record of a task multiplies its old
    counts by it), so the rate follows a policy that improves. A file written with another
    `pass_threshold` or `decay` is refused (`ValueError`): its counts mean something else.
    """

    def __init__(
        self, path: str | Path, *, pass_threshold: float = 1.0, decay: float = 1.0
    ) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1] (got {decay})")
        self.path = Path(path)
        self.pass_threshold = pass_threshold
        self.decay = decay
        self.tasks: dict[str, TaskRecord] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        data = json.loads(self.path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{self.path}: not a pass-rate file ({FORMAT})")
        settings = {"pass_threshold": self.pass_threshold, "decay": self.decay}
        stored = {key: data.get(key) for key in settings}
        if stored != settings:
            raise ValueError(f"{self.path} was recorded with {stored}, not {settings}")
        self.tasks = {
            task: TaskRecord(float(r["samples"]), float(r["passed"]))
            for task, r in data["tasks"].items()
        }

    def get(self, task_id: str) -> TaskRecord | None:
        """The task's record, or None if it was never recorded."""
        return self.tasks.get(task_id)

    def record(self, task_id: str, rewards: Sequence[float], *, save: bool = True) -> None:
        """Add one group's rewards to its task's record (and save the file)."""
        if not task_id:
            raise ValueError("a task id must be a non-empty string")
        if not all(math.isfinite(r) for r in rewards):
            raise ValueError(f"task {task_id}: rewards must be finite (got {list(rewards)})")
        record = self.tasks.setdefault(task_id, TaskRecord())
        record.samples = record.samples * self.decay + len(rewards)
        passed = sum(1 for r in rewards if r >= self.pass_threshold)
        record.passed = record.passed * self.decay + passed
        if save:
            self.save()

    def record_groups(self, groups: Iterable[Group]) -> int:
        """Record every valid group under its `task_id` (one save); how many were recorded.
        `ValueError` for a valid group without a task id."""
        recorded = 0
        for group in groups:
            if not group.valid:
                continue
            if group.task_id is None:
                raise ValueError(f"group {group.group_id} has no task_id (set GroupSpec.task_id)")
            self.record(group.task_id, group.rewards, save=False)
            recorded += 1
        self.save()
        return recorded

    def save(self) -> None:
        """Write the file atomically (a crash leaves the old one or the new one)."""
        data = {
            "format": FORMAT,
            "pass_threshold": self.pass_threshold,
            "decay": self.decay,
            "tasks": {t: {"samples": r.samples, "passed": r.passed} for t, r in self.tasks.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class Band:
    """Tasks whose pass rate is in [low, high] get `weight` (the first band that matches)."""

    low: float
    high: float
    weight: float


# Order matters: the exact ends first, then what lies between.
DEFAULT_BANDS = (Band(0.0, 0.0, 0.25), Band(1.0, 1.0, 0.1), Band(0.0, 1.0, 1.0))


class CurriculumSampler:
    """Draws task ids by difficulty band (module docstring); deterministic under `seed`."""

    def __init__(
        self,
        rates: PassRates,
        tasks: Sequence[str],
        *,
        bands: Sequence[Band] = DEFAULT_BANDS,
        unseen_weight: float = 1.0,
        min_samples: float = 1.0,
        seed: int = 0,
    ) -> None:
        if len(set(tasks)) != len(tasks) or not tasks:
            raise ValueError("tasks must be a non-empty list of distinct ids")
        weights = [b.weight for b in bands] + [unseen_weight]
        if any(w < 0 or not math.isfinite(w) for w in weights):
            raise ValueError(f"weights must be finite and >= 0 (got {weights})")
        self.rates = rates
        self.tasks = list(tasks)
        self.bands = tuple(bands)
        self.unseen_weight = unseen_weight
        self.min_samples = min_samples
        self._rng = random.Random(seed)

    def weight(self, task_id: str) -> float:
        """The task's weight: its band's, or `unseen_weight` with too few samples."""
        record = self.rates.get(task_id)
        if record is None or record.samples < self.min_samples:
            return self.unseen_weight
        rate = record.pass_rate
        for band in self.bands:
            if band.low <= rate <= band.high:
                return band.weight
        raise ValueError(f"task {task_id}: pass rate {rate:.3f} is in no band of {self.bands}")

    def sample(self, k: int) -> list[str]:
        """`k` task ids drawn with replacement by weight (weights read once, now)."""
        weights = [self.weight(t) for t in self.tasks]
        if not sum(weights) > 0:
            raise ValueError("every task has weight 0: nothing to draw")
        return self._rng.choices(self.tasks, weights, k=k)

    def stream(
        self, request_for: Callable[[str], JobRequest], *, n: int, id_prefix: str
    ) -> Iterator[GroupSpec]:
        """Endless `GroupSpec`s of n samples, one task drawn per group with the weights of
        the moment (records added meanwhile count); group ids `<id_prefix><i>`: give each
        run and step a prefix of its own (a server replays results for an id it knows)."""
        index = 0
        while True:
            task = self.sample(1)[0]
            yield GroupSpec(f"{id_prefix}{index}", request_for(task), n, task_id=task)
            index += 1
