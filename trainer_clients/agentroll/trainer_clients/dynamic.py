"""Dynamic sampling: batches of groups worth training on, refilled from a task stream.

A group whose rewards are all equal gives every sample a GRPO advantage of zero: it costs a
training step's compute and teaches nothing. `AsyncDynamicSampler` (blocking twin:
`DynamicSampler`) drops such groups, and groups that came back invalid, and submits more from
the stream until the batch holds `size` groups that teach something, or a cap says the stream
cannot fill it.

What is kept is decided group by group *in stream order*, never by finishing order: a batch
is the first `size` groups of the stream, from where the last batch stopped, whose own
rewards differ. A fast group finished ahead of a slow one waits for it; with `lookahead`
groups submitted ahead, those past the batch's end are not thrown away but open the next
batch. So a task whose rollouts take long is exactly as likely to be trained on as a quick
one, and inside each group the collector's by-index membership holds as before.

A group that waited (finished ahead of its turn) is judged for staleness again when its turn
comes, against the live version then: with the collector's stale="drop" it is sampled again in
its place in the order, as `<group>.again<k>` (at most `max_retries` times, then dropped as
invalid; the tries of its stale samplings count in its `jobs_submitted`); with stale="flag"
its stale members are flagged. Dropping it instead would drop
exactly the groups that were quick.

The cost goes to `collector.stats.dynamic` (groups generated against kept, rollouts spent):

    sampler = AsyncDynamicSampler(collector, specs)    # specs: an iterator of GroupSpec
    batch = await sampler.next_batch(8)             # 8 groups with unequal rewards
    train(pad_batch(batch.groups))
    rates.record_groups(batch.groups + batch.dropped)   # a curriculum learns from all
"""

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from agentroll.trainer_clients.collector import AsyncGroupCollector
from agentroll.trainer_clients.errors import BatchShortfall
from agentroll.trainer_clients.groups import Group, GroupSpec


@dataclass
class Batch:
    """One filled batch: `groups` to train on, in stream order, and what it cost."""

    groups: list[Group]
    dropped: list[Group] = field(default_factory=list)
    """Groups generated for it and not kept (equal rewards, or invalid), in stream order."""
    rollouts_spent: int = 0
    """Tries submitted for every group decided for this batch, kept or dropped."""

    @property
    def groups_generated(self) -> int:
        """Groups decided for this batch: kept and dropped."""
        return len(self.groups) + len(self.dropped)


@dataclass
class _Undecided:
    spec: GroupSpec
    root: str = ""
    """The stream's group id (a stale group's new samplings are `<root>.again<k>`)."""
    rounds: int = 0
    """Times it was sampled again for staleness."""
    spent_before: int = 0
    """Tries spent on its stale samplings: they count in the one decided."""

    def __post_init__(self) -> None:
        self.root = self.root or self.spec.group_id


class AsyncDynamicSampler:
    """Fills batches from `specs` through `collector` (module docstring).

    `max_refills`: groups one batch may submit beyond its `size` (default `3 * size`);
    `lookahead`: groups kept in flight beyond what the batch still needs (throughput; they
    open the next batch). The collector's groups must all come through this sampler.
    """

    def __init__(
        self,
        collector: AsyncGroupCollector,
        specs: Iterable[GroupSpec],
        *,
        max_refills: int | None = None,
        lookahead: int = 0,
    ) -> None:
        if lookahead < 0 or (max_refills is not None and max_refills < 0):
            raise ValueError("lookahead and max_refills must be >= 0")
        self.collector = collector
        self.max_refills = max_refills
        self.lookahead = lookahead
        self._specs = iter(specs)
        self._exhausted = False
        self._order: deque[str] = deque()
        """Group ids submitted and not decided yet, in stream order."""
        self._finished: dict[str, Group] = {}
        self._undecided: dict[str, _Undecided] = {}
        """Per undecided group id: its spec (what a stale one is sampled again from)."""

    async def next_batch(self, size: int, *, timeout_s: float = 3600.0) -> Batch:
        """The next `size` groups with unequal rewards, in stream order; `BatchShortfall`
        when the stream or the refill cap cannot fill it, `TimeoutError` when no group
        finishes for `timeout_s`, and whatever `collector.next_group` raises."""
        if size < 1:
            raise ValueError(f"size must be >= 1 (got {size})")
        stats = self.collector.stats.dynamic
        stats.batches += 1
        cap = size + (3 * size if self.max_refills is None else self.max_refills)
        batch = Batch(groups=[])
        submitted = 0
        while len(batch.groups) < size:
            want = size - len(batch.groups) + self.lookahead - len(self._order)
            submitted += await self._submit(max(0, min(want, cap - submitted)))
            if not self._order:
                stats.shortfalls += 1
                why = "the task stream ran out" if self._exhausted else (
                    f"{cap} groups submitted for it (max_refills {cap - size}): most tasks "
                    "score the same on every sample (all solved or none: see the curriculum)"
                )  # fmt: skip
                raise BatchShortfall(batch, size, why)
            group = await self._head(timeout_s)
            self._decide(group, batch)
        return batch

    async def _submit(self, count: int) -> int:
        specs: list[GroupSpec] = []
        while len(specs) < count and not self._exhausted:
            spec = next(self._specs, None)
            if spec is None:
                self._exhausted = True
            else:
                specs.append(spec)
        if specs:
            await self.collector.submit_groups(specs)
            self._order.extend(s.group_id for s in specs)
            self._undecided.update((s.group_id, _Undecided(s)) for s in specs)
        return len(specs)

    async def _head(self, timeout_s: float) -> Group:
        """The oldest undecided group, once finished (later ones finishing first wait)."""
        head = self._order[0]
        while head not in self._finished:
            group = await self.collector.next_group(timeout_s)
            if group is None:
                raise TimeoutError(f"no group finished in {timeout_s:g} s (waiting on {head})")
            if group.group_id not in self._order:
                raise RuntimeError(
                    f"group {group.group_id} was not submitted by this sampler: "
                    "give it a collector of its own"
                )
            self._finished[group.group_id] = group
        group = self._finished.pop(head)
        if await self._stale_again(group):
            return await self._head(timeout_s)
        self._order.popleft()
        group.jobs_submitted += self._undecided.pop(head).spent_before
        return group

    async def _stale_again(self, group: Group) -> bool:
        """Judge staleness now; True when the group was replaced by a fresh sampling of it
        (at the head of the order)."""
        collector = self.collector
        stale = collector.clock.stale(group.trajectories, collector.max_policy_lag)
        if not stale or not group.valid:
            return False
        if collector.stale_mode == "flag":
            group.stale = sorted({*group.stale, *(job_id for job_id, _ in stale)})
            return False
        undecided = self._undecided[group.group_id]
        if undecided.rounds >= collector.max_retries:
            group.valid, group.reason = False, f"stale when its turn came: {stale[0][1]}"
            return False
        rounds = undecided.rounds + 1
        fresh = dataclasses.replace(undecided.spec, group_id=f"{undecided.root}.again{rounds}")
        await collector.submit_groups([fresh])
        del self._undecided[group.group_id]
        spent = undecided.spent_before + group.jobs_submitted
        self._undecided[fresh.group_id] = _Undecided(fresh, undecided.root, rounds, spent)
        self._order[0] = fresh.group_id
        collector.stats.dynamic.resampled_stale += 1
        return True

    def _decide(self, group: Group, batch: Batch) -> None:
        stats = self.collector.stats.dynamic
        stats.groups_generated += 1
        stats.rollouts_spent += group.jobs_submitted
        batch.rollouts_spent += group.jobs_submitted
        if group.valid and not group.zero_variance:
            batch.groups.append(group)
            stats.groups_kept += 1
            stats.rollouts_kept += len(group.trajectories)
            return
        batch.dropped.append(group)
        if group.valid:
            stats.dropped_zero_variance += 1
        else:
            stats.dropped_invalid += 1
