"""`AsyncGroupCollector`: submit GRPO groups, get each back whole and unbiased, or invalid.

One pump task reads the pool's merged results feed and settles each try of a sample:

- `ok` / `agent_error` with a reward: usable, unless its verifier masked it
  (`metadata.mask_sample`): then the same sample is tried again, counted as `masked`;
- an outcome in `retry_outcomes` (default `infra_error`, and `cancelled` by someone else):
  the same sample is tried again as `<group>-s<k>-r<attempt+1>` while it has retries left;
- anything else (`timed_out` by default, a usable outcome without a reward): the sample is
  lost with that cause.

Which samples make the group is fixed at submission, by index (`membership`): a member lost
to `infra_error` is stood in for by the next over-sampled spare in index order; a member lost
for any other reason makes the group invalid, with the reason. Keeping the first n finishers
(`selection="first_finished"`) is available, but biased: see `FIRST_FINISHED_BIAS`.

Staleness is judged for the whole group when `next_group` hands it out, against the live
policy version (the pool's last `resume`, or a later one the trainer set): a group with a
member more than `max_policy_lag` versions away from it is sampled again whole
(stale="drop", at most `max_retries` times) or handed out with `Group.stale` listing those
members (stale="flag"). Dropping single stale members would drop exactly the slow ones.

No error stops the collector silently: a resubmission the server refuses for a reason that
waiting cannot cure makes its group invalid with the server's answer; a busy or unreachable
server is retried with backoff; a failure of the pool (every server dead, a results feed that
cannot be read) is raised from `next_group`, and so is `InfraCircuitOpen` after
`max_consecutive_infra_errors` tries in a row ended `infra_error` (see `breaker`).
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Literal

from agentroll.server.schema import JobRequest, Outcome, Trajectory
from agentroll.trainer_clients.breaker import InfraBreaker
from agentroll.trainer_clients.client import AsyncRolloutClient
from agentroll.trainer_clients.errors import ApiError, ClientError, ServerUnavailable
from agentroll.trainer_clients.groups import CollectorStats, Group, GroupSpec
from agentroll.trainer_clients.membership import LiveGroup, Selection
from agentroll.trainer_clients.server_pool import AsyncServerPool
from agentroll.trainer_clients.staleness import PolicyClock

log = logging.getLogger("agentroll.trainer_clients")
USABLE = frozenset({Outcome.ok, Outcome.agent_error})
RETRY = frozenset({Outcome.infra_error, Outcome.cancelled})
Servers = AsyncServerPool | AsyncRolloutClient | str | Sequence[str | AsyncRolloutClient]
FIRST_FINISHED_BIAS = (
    "selection='first_finished' keeps the fastest rollouts; where failing takes longer than "
    "succeeding it overstates the reward (simulated through this collector, true success rate "
    "0.30, failures slower: kept mean 0.33 with oversample=1, 0.39 with oversample=2; by index: "
    "0.29 either way)"
)


class AsyncGroupCollector:
    """Submits GRPO groups and returns each once whole, or marked invalid (module docstring).

    Use it started (`async with`, or `await start()`). When every server is dead, the
    pending groups are returned invalid and `next_group` then raises `NoServerAvailable`.
    """

    def __init__(
        self,
        servers: Servers,
        *,
        max_retries: int = 2,
        oversample: int = 0,
        selection: Selection = "by_index",
        group_timeout_s: float | None = None,
        max_policy_lag: int | None = None,
        stale: Literal["drop", "flag"] = "drop",
        retry_outcomes: Iterable[Outcome] = RETRY,
        zero_variance_eps: float = 1e-6,
        max_consecutive_infra_errors: int | None = 32,
        poll_s: float = 0.5,
        max_backoff_s: float = 10.0,
        pool_options: Mapping[str, Any] | None = None,
    ) -> None:
        """`servers`: a started pool, or a client, URL or list of them (a pool is started
        here, with `pool_options` passed to `AsyncServerPool`). `max_consecutive_infra_errors`:
        the circuit breaker's limit (None: resample forever)."""
        if selection == "first_finished":
            log.warning(FIRST_FINISHED_BIAS)
        self.max_retries = max_retries
        self.oversample = oversample
        self.selection: Selection = selection
        self.group_timeout_s = group_timeout_s
        self.max_policy_lag = max_policy_lag
        self.stale_mode = stale
        self.retry_outcomes = frozenset(retry_outcomes)
        self.zero_variance_eps = zero_variance_eps
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.stats = CollectorStats()
        self.breaker = InfraBreaker(max_consecutive_infra_errors)
        self._servers = servers
        self._pool_options = dict(pool_options or {})
        self._own_pool = not isinstance(servers, AsyncServerPool)
        self.pool = servers if isinstance(servers, AsyncServerPool) else None
        self.clock = PolicyClock(lambda: self.pool)
        self._groups: dict[str, LiveGroup] = {}
        self._job_group: dict[str, LiveGroup] = {}
        self._used_ids: set[str] = set()
        self._done: asyncio.Queue[tuple[LiveGroup, str | None]] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    # -- life -----------------------------------------------------------------------------
    async def start(self) -> "AsyncGroupCollector":
        """Start the pool if this collector makes it, then the pump; returns self."""
        if self.pool is None:
            servers = self._servers
            listed = [servers] if isinstance(servers, (str, AsyncRolloutClient)) else servers
            assert not isinstance(listed, AsyncServerPool)
            self.pool = await AsyncServerPool(list(listed), **self._pool_options).start()
        self._pump = asyncio.create_task(self._run(), name="group-collector")
        return self

    async def close(self) -> None:
        """Stop collecting; jobs still running are cancelled on their servers."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        if self._background:
            await asyncio.wait(set(self._background), timeout=30.0)
        if self.pool is not None:
            live = list(self._job_group)
            if live:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.pool.cancel(live), 10.0)
            if self._own_pool:
                await self.pool.close()

    async def __aenter__(self) -> "AsyncGroupCollector":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def policy_version(self) -> int:
        """The live policy version: the newest of the pool's last `resume` and what the
        trainer set here (versions only move forward), else 0."""
        return self.clock.version()

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self.clock.set(version)

    @property
    def policy_versions(self) -> dict[str, int]:
        """Versions of named policies the trainer set (the pool's `resume`s count too)."""
        return self.clock.named

    def current_version(self, policy: str) -> int | None:
        """The live version of `policy` (None: unknown, so nothing of it is stale)."""
        return self.clock.current(policy)

    @property
    def pending(self) -> int:
        """Groups submitted and not finished yet."""
        return len(self._groups)

    def has_more(self) -> bool:
        """Some group is still pending, or finished and not taken yet."""
        return bool(self._groups) or not self._done.empty()

    # -- submitting -----------------------------------------------------------------------
    async def submit(self, group_id: str, request: JobRequest | Mapping[str, Any], n: int) -> None:
        """Start a group of `n` samples (plus `oversample` spares) of one request."""
        await self.submit_groups([GroupSpec(group_id, JobRequest.model_validate(request), n)])

    async def submit_groups(self, specs: Iterable[GroupSpec]) -> None:
        """Start several groups; `ValueError` for `n < 1` or a group id this collector has
        used before (its job ids would replay that group's results), `RuntimeError` before
        `start`. If a server refuses, none of these groups is kept and the refusal is raised."""
        if self.pool is None:
            raise RuntimeError("start the collector first (async with / await start())")
        if self._failure is not None:
            raise self._failure  # stopped: nothing submitted now would ever be collected
        specs = list(specs)
        ids = [s.group_id for s in specs]
        for spec in specs:
            if spec.n < 1:
                raise ValueError(f"group {spec.group_id}: n must be >= 1")
            if spec.group_id in self._used_ids or ids.count(spec.group_id) > 1:
                raise ValueError(
                    f"group id {spec.group_id} was already used by this collector: its job ids "
                    "would replay the old results; give every group a new id"
                )
        budget = self.group_timeout_s
        fresh: list[LiveGroup] = []
        requests: list[JobRequest] = []
        for spec in specs:
            deadline = time.monotonic() + budget if budget is not None else float("inf")
            live = LiveGroup(spec, self.oversample, deadline)
            fresh.append(live)
            requests += [self._sample(live, k) for k in range(live.size)]
        try:
            await self.pool.submit(requests)
        except BaseException:
            await self._forget(fresh)
            raise
        for live in fresh:
            self._groups[live.spec.group_id] = live
            self._used_ids.add(live.spec.group_id)
        self.stats.groups_submitted += len(fresh)
        self.stats.jobs_submitted += len(requests)

    async def _forget(self, refused: list[LiveGroup]) -> None:
        """Undo a refused submission: no phantom group, nothing left running anywhere."""
        job_ids = [job_id for live in refused for job_id in live.jobs]
        for job_id in job_ids:
            self._job_group.pop(job_id, None)
        assert self.pool is not None
        with contextlib.suppress(ClientError, TimeoutError):
            await asyncio.wait_for(self.pool.cancel(job_ids), 30.0)

    def _sample(self, live: LiveGroup, index: int) -> JobRequest:
        request = live.spec.sample(index, live.attempts[index])
        if request.policy_version is None and self.clock.known():
            # lets the server refuse to start it once it lags too far (stale_policy)
            request = request.model_copy(update={"policy_version": self.policy_version})
        job_id = request.job_id
        assert job_id is not None
        live.jobs[job_id] = index
        live.submitted += 1
        self._job_group[job_id] = live
        return request

    # -- receiving ------------------------------------------------------------------------
    async def next_group(self, timeout_s: float | None = None) -> Group | None:
        """The next finished group (valid or not), or None after `timeout_s`; a group found
        stale here is sampled again (stale="drop") and the wait goes on."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._failure is not None and self._done.empty():
                raise self._failure
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:  # not wait_for: on 3.11 it can swallow a cancel that races with the result
                async with asyncio.timeout(left):
                    live, reason = await self._done.get()
            except TimeoutError:
                if self._failure is not None:
                    raise self._failure from None
                return None
            group = self._hand_out(live, reason)
            if group is not None:
                return group

    async def groups(self, *, timeout_s: float = 3600.0) -> AsyncIterator[Group]:
        """Every submitted group as it finishes, until none is pending or queued.

        Raises TimeoutError if nothing finishes for `timeout_s`.
        """
        while self.has_more():
            group = await self.next_group(timeout_s)
            if group is None:
                raise TimeoutError(f"no group finished in {timeout_s:g} s ({self.pending} pending)")
            yield group

    async def collect(
        self, specs: Iterable[GroupSpec], *, timeout_s: float = 3600.0
    ) -> list[Group]:
        """Submit groups and wait for all of them (valid or not), in completion order."""
        await self.submit_groups(specs)
        return [g async for g in self.groups(timeout_s=timeout_s)]

    def _hand_out(self, live: LiveGroup, reason: str | None) -> Group | None:
        picks = sorted(live.usable) if reason is None else []
        stale = [] if reason is not None else self.clock.stale(
            [live.usable[k] for k in picks], self.max_policy_lag
        )  # fmt: skip
        if stale and self.stale_mode == "drop":
            self.stats.stale_dropped += len(stale)
            live.dropped["stale"] += len(stale)
            self.stats.dropped["stale"] += len(stale)
            if self._resample(live, f"stale at hand-out: {stale[0][1]}"):
                return None
            reason = f"stale after {live.rounds} resampling(s): {stale[0][1]}"
        if stale and self.stale_mode == "flag":
            self.stats.stale_flagged += len(stale)
        return self._group(live, reason, [job_id for job_id, _ in stale])

    def _group(self, live: LiveGroup, reason: str | None, stale: list[str]) -> Group:
        spec = live.spec
        usable = [live.usable[k] for k in sorted(live.usable)]
        group = Group(
            group_id=spec.group_id,
            n=spec.n,
            valid=reason is None,
            trajectories=usable,
            reason=reason,
            stale=stale,
            dropped=dict(live.dropped),
            jobs_submitted=live.submitted,
            elapsed_s=time.monotonic() - live.started,
            task_id=spec.task_id,
        )
        if group.valid:
            rewards = group.rewards
            group.zero_variance = max(rewards) - min(rewards) <= self.zero_variance_eps
            self.stats.groups_valid += 1
            self.stats.zero_variance += group.zero_variance
            self.stats.samples_used += len(usable)
            self.stats.group_seconds.append(group.elapsed_s)
        else:
            for trajectory in live.usable.values():
                self.stats.note_unused(trajectory.outcome.value, trajectory.timing.total_s)
            self.stats.groups_invalid += 1
            log.warning("group %s invalid: %s", spec.group_id, reason)
        return group

    # -- the pump -------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self.pool is not None
        try:
            while True:
                trajectory = await self.pool.next_result(self.poll_s)
                if trajectory is not None:
                    self._settle(trajectory)
                self._expire()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the pool failed, or the breaker opened: say so
            self._failure = exc
            for live in list(self._groups.values()):
                self._finish(live, f"collector stopped: {exc}")

    def _settle(self, trajectory: Trajectory) -> None:
        live = self._job_group.pop(trajectory.job_id, None)
        if live is None:
            return  # a job we already cancelled or gave up on
        index = live.jobs.pop(trajectory.job_id)
        self.stats.note_finished(trajectory)
        self.breaker.note(trajectory)  # raises InfraCircuitOpen: the pump stops, with it
        outcome = trajectory.outcome
        usable = outcome in USABLE and trajectory.reward is not None
        if usable and trajectory.metadata.get("mask_sample") is True:
            self._drop(live, index, trajectory, "masked", retry=True)
        elif usable:
            live.usable[index] = trajectory
            live.arrival.append(index)
        elif _cancelled_as_stale(trajectory) and self.stale_mode == "drop":
            self._drop(live, index, trajectory, "stale", retry=False)
            if self._groups.get(live.spec.group_id) is live:
                self._resample(live, "the server cancelled a sample as stale")
            return
        else:
            cause = "no_reward" if outcome in USABLE else outcome.value
            self._drop(live, index, trajectory, cause, retry=outcome in self.retry_outcomes)
        self._judge(live)

    def _drop(
        self, live: LiveGroup, index: int, trajectory: Trajectory, cause: str, *, retry: bool
    ) -> None:
        live.dropped[cause] += 1
        self.stats.dropped[cause] += 1
        self.stats.note_unused(trajectory.outcome.value, trajectory.timing.total_s)
        if retry and live.retries[index] < self.max_retries:
            live.attempts[index] += 1
            live.retries[index] += 1
            self.stats.retries += 1
            self._resubmit(live, [self._sample(live, index)])
        else:
            live.lost[index] = cause

    def _judge(self, live: LiveGroup) -> None:
        if self._groups.get(live.spec.group_id) is not live:
            return
        verdict = live.verdict(self.selection)
        if verdict.picks is not None:
            for index in set(live.usable) - set(verdict.picks):  # spares never needed
                live.usable.pop(index)
            self._finish(live, None)
        elif verdict.reason is not None:
            self._finish(live, verdict.reason)

    def _resubmit(self, live: LiveGroup, requests: list[JobRequest]) -> None:
        self.stats.jobs_submitted += len(requests)
        self._spawn(self._send(live, requests))

    async def _send(self, live: LiveGroup, requests: list[JobRequest]) -> None:
        """Submit tries of one group; waits out a busy or unreachable server, and makes the
        group invalid on a refusal that waiting cannot cure."""
        assert self.pool is not None
        attempt = 0
        while self._groups.get(live.spec.group_id) is live:
            try:
                await self.pool.submit(requests)
                return
            except ApiError as exc:
                if not exc.transient:
                    self._finish(live, f"resubmission refused: {exc}")
                    return
                cause: ClientError = exc
            except ServerUnavailable as exc:
                cause = exc
            delay = min(0.5 * 2**attempt, self.max_backoff_s)
            log.warning("resubmitting %d job(s), again in %.1f s: %s", len(requests), delay, cause)
            await asyncio.sleep(delay)
            attempt += 1

    def _resample(self, live: LiveGroup, why: str) -> bool:
        """Sample the whole group again (new tries of every index); False once it has been
        resampled `max_retries` times."""
        if live.rounds >= self.max_retries:
            return False
        log.info("group %s sampled again: %s", live.spec.group_id, why)
        self._cancel_jobs(live)
        for trajectory in live.usable.values():
            self.stats.note_unused("stale", trajectory.timing.total_s)
        live.rounds += 1
        live.usable.clear()
        live.lost.clear()
        live.arrival.clear()
        live.retries.clear()
        for index in range(live.size):
            live.attempts[index] += 1
        self._groups[live.spec.group_id] = live
        self._resubmit(live, [self._sample(live, k) for k in range(live.size)])
        return True

    def _expire(self) -> None:
        now = time.monotonic()
        for live in [g for g in self._groups.values() if g.deadline <= now]:
            waiting = live.pending()
            for _ in waiting:
                self.stats.note_unused("unfinished", None)
            self._finish(
                live,
                f"budget of {self.group_timeout_s:g} s spent waiting on samples {waiting}: "
                f"{len(live.usable)}/{live.spec.n} usable",
            )

    def _finish(self, live: LiveGroup, reason: str | None) -> None:
        if self._groups.pop(live.spec.group_id, None) is None:
            return
        cancelled = self._cancel_jobs(live)
        self.stats.extras_cancelled += cancelled if reason is None else 0
        if reason is None and self.selection == "first_finished":
            for _ in range(cancelled):  # the stragglers: unused because they were slow
                self.stats.note_unused("unfinished", None)
        self._done.put_nowait((live, reason))

    def _cancel_jobs(self, live: LiveGroup) -> int:
        leftovers = list(live.jobs)
        for job_id in leftovers:
            self._job_group.pop(job_id, None)
        live.jobs.clear()
        if leftovers and self.pool is not None:
            self._spawn(self._cancel(leftovers))
        return len(leftovers)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _cancel(self, job_ids: list[str]) -> None:
        assert self.pool is not None
        try:
            await asyncio.wait_for(self.pool.cancel(job_ids), 30.0)
        except Exception as exc:  # cancelling extras is best effort: their results are ignored
            log.warning("cancelling %d job(s) failed: %s", len(job_ids), exc)


def _cancelled_as_stale(trajectory: Trajectory) -> bool:
    error = trajectory.error
    return (
        trajectory.outcome == Outcome.cancelled
        and error is not None
        and (error.type == "stale_policy")
    )
