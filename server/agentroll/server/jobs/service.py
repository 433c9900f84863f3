"""`JobService`: admission, the table of live jobs, cancellation, and the one committer.

Each admitted job gets one asyncio task that carries its `Rollout` through the pipeline, so
a cancel reaches it in any state at once: cancelling the task interrupts whatever it awaits
(a queue slot, the backend, a sandbox call). The task then persists the trajectory the
rollout built; only after that commit is the result announced to trainers.
"""

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable

from agentroll.server.errors import (
    InvalidInstances,
    JobConflict,
    ResultRejected,
    ShuttingDown,
    StoreError,
    TooManyJobs,
    UnknownJob,
)
from agentroll.server.fingerprint import request_fingerprint
from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Pipeline, Refused, Verdict
from agentroll.server.jobs.results import STATUS_BY_OUTCOME, unrun_trajectory
from agentroll.server.jobs.rollout import Rollout
from agentroll.server.jobs.versions import stale_reason, stamped
from agentroll.server.logs import job_id_var
from agentroll.server.schema import (
    JobRequest,
    JobState,
    JobView,
    Outcome,
    PoolSizes,
    PoolsPatch,
    SubmittedJob,
    Timing,
    Trajectory,
)
from agentroll.server.state import ServerState
from agentroll.server.store import JobRow, NewJob

log = logging.getLogger("agentroll.server")
PERSIST_RETRY_MIN_S = 0.2
PERSIST_RETRY_MAX_S = 5.0


def _check_agents(request: JobRequest, drives: tuple[str, ...]) -> None:
    """The job declares exactly the agents its handler drives: a missing one would fail
    mid-rollout, and an extra one would sample nothing while the handler's tokens came from
    another policy (the trainer would get an empty batch for the policy the job names)."""
    declared = list(request.agents or {})
    missing = [a for a in drives if a not in declared]
    if missing:
        raise ValueError(
            f"handler {request.handler!r} drives agents {list(drives)}; "
            f"the job does not declare {missing}"
        )
    extra = [a for a in declared if a not in drives]
    if extra:
        driven = f"drives agents {list(drives)}" if drives else "is single-agent"
        raise ValueError(
            f"handler {request.handler!r} {driven}; the job declares {extra}, which it never uses"
        )


class JobService:
    """The life of every job: admission, the table of live jobs, cancellation, and the one
    commit of each result. The resources it uses are the server's (`state`)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        started = state.store.count_start  # requeues are counted by attempts that started
        self.pipeline = Pipeline(
            state.settings.pools, self._refuse_if_stale, state.admission, started
        )
        self.live: dict[str, LiveJob] = {}
        self.accepting = True
        self._submit_lock = asyncio.Lock()
        self._results_event = asyncio.Event()
        self._closing = asyncio.Event()
        """Set at shutdown: wakes every long-poll so none holds the server up."""

    # -- start and stop -------------------------------------------------------------------
    def begin_shutdown(self) -> None:
        """Stop admitting and release every long-poll (called as soon as shutdown starts)."""
        self.accepting = False
        self._closing.set()

    async def shutdown(self, grace_s: float) -> None:
        """Stop admitting, let live jobs finish for `grace_s`, cancel and persist the rest."""
        self.begin_shutdown()
        tasks = [j.task for j in self.live.values() if j.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        for job in list(self.live.values()):
            self._cancel(job, "server_shutdown")
        remaining = [j.task for j in self.live.values() if j.task is not None]
        if remaining:
            await asyncio.wait(remaining, timeout=max(5.0, grace_s))
        if self.state.teardowns:
            await asyncio.wait(set(self.state.teardowns), timeout=30.0)

    # -- submission -----------------------------------------------------------------------
    async def submit(self, requests: list[JobRequest]) -> list[SubmittedJob]:
        if not self.accepting:
            raise ShuttingDown
        # Off the event loop: a handler may read files to check an instance (a task folder).
        await asyncio.to_thread(self._validate, requests)
        async with self._submit_lock:
            return await self._admit(requests)

    def _validate(self, requests: list[JobRequest]) -> None:
        problems: list[dict[str, object]] = []
        for index, request in enumerate(requests):
            try:
                handler = self.state.registry.for_job(request)  # UnknownHandlerError -> 400
                handler.validate_instance(request.instance)
                _check_agents(request, handler.agent_names)
            except ValueError as exc:
                problems.append({"index": index, "job_id": request.job_id, "error": str(exc)})
        if problems:
            raise InvalidInstances(problems)

    async def _admit(self, requests: list[JobRequest]) -> list[SubmittedJob]:
        fingerprints = [request_fingerprint(r) for r in requests]
        ids = [r.job_id or uuid.uuid4().hex for r in requests]
        first_seen: dict[str, str] = {}
        conflicts: list[str] = []
        for job_id, fp in zip(ids, fingerprints, strict=True):
            if first_seen.setdefault(job_id, fp) != fp:
                conflicts.append(job_id)
        existing = await self.state.store.existing(first_seen)
        conflicts += [i for i, row in existing.items() if row.request_hash != first_seen[i]]
        if conflicts:
            raise JobConflict(conflicts)
        fresh = [i for i in first_seen if i not in existing]
        if len(self.live) + len(fresh) > self.state.settings.max_live_jobs:
            raise TooManyJobs(self.state.settings.max_live_jobs)
        now = time.time()
        # Stamped before the insert: the version a job was submitted under survives a restart.
        by_id = {
            job_id: stamped(request.model_copy(update={"job_id": job_id}), self.state.policies)
            for job_id, request in zip(ids, requests, strict=True)
        }
        await self.state.store.insert_jobs(
            [
                NewJob(
                    i,
                    by_id[i].model_dump_json(),
                    first_seen[i],
                    by_id[i].handler,
                    by_id[i].group_id,
                    now,
                )
                for i in fresh
            ]
        )
        for job_id in fresh:
            self.launch(LiveJob(job_id, by_id[job_id], now))
        fresh_set = set(fresh)
        return [
            SubmittedJob(job_id=i, state=self._state_of(i, existing), created=i in fresh_set)
            for i in ids
        ]

    def _state_of(self, job_id: str, rows: dict[str, JobRow]) -> JobState:
        live = self.live.get(job_id)
        if live is not None:
            return live.state
        return JobState(rows[job_id].state)

    # -- the life of a job ----------------------------------------------------------------
    def launch(self, job: LiveJob) -> None:
        self.live[job.job_id] = job
        job.task = asyncio.create_task(self._lifecycle(job), name=f"job:{job.job_id}")

    async def _lifecycle(self, job: LiveJob) -> None:
        """Carry the job through the pipeline, then commit exactly one result.

        From the moment the pipeline has a verdict the job is `finishing`: a cancel can no
        longer reach it, and the conclusion (trajectory, commit) runs as its own shielded task,
        so neither a late cancel nor an exception can lose a finished result.
        """
        job_id_var.set(job.job_id)  # this task's own context: every log line names the job
        rollout = Rollout.open(job, self.state)
        try:
            verdict = await rollout.run(self.pipeline)
        except asyncio.CancelledError:
            cause = job.cancel_cause
            if cause is None:
                rollout.context.release_sandboxes()
                raise  # not ours (event loop teardown): the job stays unfinished and is recovered
            self._absorb_cancel()
            verdict = Verdict(Outcome.cancelled, None, cause, f"job cancelled ({cause})", None)
        except Exception as exc:  # a bug in the server, never the policy's doing
            log.exception("job %s failed in the pipeline", job.job_id)
            verdict = Verdict(Outcome.infra_error, None, "server_error", repr(exc))
        job.finishing = True
        rollout.context.release_sandboxes()  # in the background: the result need not wait for it
        conclusion = asyncio.ensure_future(self._conclude(rollout, verdict))
        while not conclusion.done():
            try:
                await asyncio.shield(conclusion)
            except asyncio.CancelledError:
                if job.cancel_cause is None:
                    raise  # event loop teardown: the job is recovered by the next server
                self._absorb_cancel()  # a cancel that raced the verdict: too late, commit it

    @staticmethod
    def _absorb_cancel() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()

    async def _conclude(self, rollout: Rollout, verdict: Verdict) -> None:
        measure = self.state.settings.measure_template_divergence
        trajectory = await rollout.conclude(verdict, measure_divergence=measure)
        await self.persist(rollout.record, trajectory)

    async def persist(self, job: LiveJob, trajectory: Trajectory) -> None:
        """Commit the result, retrying while the store refuses writes (e.g. a full disk).

        Until it is committed the result stays in memory and the job stays live; it is never
        visible to a trainer before the commit. A server killed meanwhile requeues the job.
        A result the database rejects outright is replaced by an `infra_error` one, so the
        job still ends with exactly one result.
        """
        state = STATUS_BY_OUTCOME[trajectory.outcome]
        result = trajectory.model_dump(mode="json")
        delay, replaced = PERSIST_RETRY_MIN_S, False
        while True:
            try:
                await self.state.store.finish(job.job_id, state.value, result)
                break
            except ResultRejected as exc:
                if not replaced:
                    log.error("job %s: %s; recording infra_error instead", job.job_id, exc)
                    verdict = Verdict(Outcome.infra_error, None, "result_rejected", str(exc))
                    trajectory = unrun_trajectory(job, verdict)
                    state = STATUS_BY_OUTCOME[trajectory.outcome]
                    result, replaced = trajectory.model_dump(mode="json"), True
                    continue
                log.warning("cannot persist job %s yet (%s); retrying", job.job_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, PERSIST_RETRY_MAX_S)
            except StoreError as exc:
                if self.state.store.closed:
                    log.error("store closed before job %s was persisted", job.job_id)
                    raise
                log.warning("cannot persist job %s yet (%s); retrying", job.job_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, PERSIST_RETRY_MAX_S)
        self.live.pop(job.job_id, None)
        job.state = state
        job.done.set()
        ev, self._results_event = self._results_event, asyncio.Event()
        ev.set()
        self._observe(trajectory)

    def _observe(self, trajectory: Trajectory) -> None:
        m = self.state.metrics
        m.jobs_finished.labels(trajectory.handler, trajectory.outcome.value).inc()
        for stage in ("init", "run", "eval"):
            timing = getattr(trajectory.timing, stage)
            if timing is not None:
                m.stage_queue_seconds.labels(stage).observe(timing.queue_s)
                m.stage_work_seconds.labels(stage).observe(timing.work_s)

    # -- policy versions ------------------------------------------------------------------
    def _refuse_if_stale(self, job: LiveJob) -> None:
        reason = stale_reason(job, self.state.policies)
        if reason is not None:
            raise Refused("stale_policy", reason)

    def cancel_stale_running(self) -> list[str]:
        """Cancel started jobs whose policy now lags beyond the bound (cause stale_policy)."""
        stale = [
            j
            for j in self.live.values()
            if j.state is not JobState.queued and stale_reason(j, self.state.policies) is not None
        ]
        return [j.job_id for j in stale if self._cancel(j, "stale_policy")]

    # -- cancellation ---------------------------------------------------------------------
    def _cancel(self, job: LiveJob, cause: str) -> bool:
        if job.finishing or job.task is None or job.task.done():
            return False
        job.cancel_cause = cause
        job.task.cancel()
        return True

    async def cancel(self, job_ids: Iterable[str], timeout_s: float = 10.0) -> list[str]:
        """Cancel live jobs; returns those cancelled once their results are persisted."""
        targets = [j for i in job_ids if (j := self.live.get(i)) is not None]
        cancelled = [j for j in targets if self._cancel(j, "cancelled_by_client")]
        if cancelled:
            waits = [asyncio.create_task(j.done.wait()) for j in cancelled]
            _, pending = await asyncio.wait(waits, timeout=timeout_s)
            for task in pending:
                task.cancel()
        return [j.job_id for j in cancelled]

    def live_ids(self, group_id: str | None = None) -> list[str]:
        return [
            j.job_id
            for j in self.live.values()
            if group_id is None or j.request.group_id == group_id
        ]

    # -- reading --------------------------------------------------------------------------
    async def view(self, job_id: str) -> JobView | None:
        job = self.live.get(job_id)
        if job is not None:
            return JobView(
                job_id=job_id,
                handler=job.request.handler,
                group_id=job.request.group_id,
                state=job.state,
                submitted_at=job.submitted_at,
                attempts=job.attempts,
                timing=job.timing,
            )
        row = await self.state.store.get_job(job_id)
        if row is None:
            return None
        raw = await self.state.store.result(job_id)
        result = None if raw is None else Trajectory.model_validate_json(raw)
        return JobView(
            job_id=job_id,
            handler=row.handler,
            group_id=row.group_id,
            state=JobState(row.state),
            submitted_at=row.submitted_at,
            finished_at=row.finished_at,
            attempts=row.attempts,
            timing=result.timing if result is not None else Timing(),
            result=result,
        )

    async def wait_result(self, job_id: str, wait_s: float) -> str | None:
        """The result JSON, waiting up to `wait_s` for a live job. `UnknownJob` if unknown."""
        job = self.live.get(job_id)
        if job is not None and wait_s > 0:
            await self._wait_any(job.done, wait_s)
        raw = await self.state.store.result(job_id)
        if raw is None and job is None and await self.state.store.get_job(job_id) is None:
            raise UnknownJob(job_id)
        return raw

    async def results_after(self, cursor: int, limit: int, wait_s: float) -> list[tuple[int, str]]:
        """Finished results with cursor > `cursor`, oldest first; long-polls up to `wait_s`."""
        changed = self._results_event
        page = await self.state.store.results_after(cursor, limit)
        if page or wait_s <= 0:
            return page
        await self._wait_any(changed, wait_s)
        return await self.state.store.results_after(cursor, limit)

    async def _wait_any(self, event: asyncio.Event, timeout_s: float) -> None:
        """Until `event`, shutdown, or `timeout_s`, whichever comes first."""
        if self._closing.is_set():
            return
        waits = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._closing.wait())}
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    def resize(self, patch: PoolsPatch) -> PoolSizes:
        """Resize the stage pools; returns the sizes now in force."""
        self.pipeline.resize(**patch.model_dump())
        pools = self.state.settings.pools
        for name, value in patch.model_dump(exclude_none=True).items():
            setattr(pools, name, value)
        return pools
