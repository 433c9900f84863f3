"""Which samples make up a group: fixed at submission by sample index, never by finishing order.

A group of n with `oversample` k submits samples 0 .. n+k-1. Its members are samples 0 .. n-1.
A member whose every try ended `infra_error` (the server's fault, not the policy's) is stood in
for by the next spare n, n+1, ... in index order; a spare that is not needed is cancelled. A
member lost for any other reason (timed out, masked by its verifier on every try, refused)
makes the group incomplete: it is reported invalid with that reason, never filled from
whichever sample happened to finish first. In agent tasks slow often means failing, so a rule
that keeps the first finishers keeps the successes: `FirstFinished` does exactly that and
exists only as an explicit, measured option.
"""

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from agentroll.server.schema import Outcome, Trajectory
from agentroll.trainer_clients.groups import GroupSpec

Selection = Literal["by_index", "first_finished"]


@dataclass
class Verdict:
    """`picks`: the sample indices that make the group (done); else `reason` (invalid), else
    neither (still waiting)."""

    picks: list[int] | None = None
    reason: str | None = None


@dataclass
class LiveGroup:
    spec: GroupSpec
    extras: int
    deadline: float
    started: float = field(default_factory=time.monotonic)
    jobs: dict[str, int] = field(default_factory=dict)
    """Live job id -> sample index."""
    attempts: Counter[int] = field(default_factory=Counter)
    """Sample index -> its latest try's number (its job id's `-r<attempt>`)."""
    retries: Counter[int] = field(default_factory=Counter)
    """Sample index -> tries spent on it in this round."""
    usable: dict[int, Trajectory] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)
    """Sample index -> why it can give nothing more (its last try's cause)."""
    arrival: list[int] = field(default_factory=list)
    """Usable sample indices in finishing order (only `first_finished` reads it)."""
    dropped: Counter[str] = field(default_factory=Counter)
    submitted: int = 0
    rounds: int = 0
    """Times the whole group was sampled again (stale at hand-out)."""

    @property
    def size(self) -> int:
        return self.spec.n + self.extras

    def pending(self) -> list[int]:
        return sorted(set(self.jobs.values()))

    def verdict(self, selection: Selection) -> Verdict:
        if selection == "first_finished":
            return self._first_finished()
        return self._by_index()

    def _by_index(self) -> Verdict:
        n = self.spec.n
        for index in range(n):  # a member lost for a non-infra reason dooms the group now
            cause = self.lost.get(index)
            if cause is not None and cause != Outcome.infra_error.value:
                return Verdict(reason=f"sample {index} lost ({cause}): the group cannot complete")
        picks: list[int] = []
        for index in range(self.size):
            if len(picks) == n:
                return Verdict(picks=picks)
            if index in self.usable:
                picks.append(index)
                continue
            cause = self.lost.get(index)
            if cause is None:
                return Verdict()  # waiting on this one: no later sample may take its place
            if cause != Outcome.infra_error.value:
                return Verdict(reason=f"stand-in sample {index} lost ({cause})")
        if len(picks) == n:
            return Verdict(picks=picks)
        infra = sum(1 for c in self.lost.values() if c == Outcome.infra_error.value)
        return Verdict(reason=f"cannot complete: {infra} sample(s) lost to infra_error, "
                       f"{self.extras} spare(s); {len(picks)}/{n} usable")  # fmt: skip

    def _first_finished(self) -> Verdict:
        n = self.spec.n
        if len(self.arrival) >= n:
            return Verdict(picks=sorted(self.arrival[:n]))
        if len(self.arrival) + len(self.pending()) < n:
            have = f"{len(self.arrival)}/{n} usable"
            return Verdict(reason=f"cannot complete: {have}, dropped {dict(self.dropped)}")
        return Verdict()
