"""`AsyncServerPool`: one trainer's view of several agentroll servers.

Groups are placed whole on the live server with the lowest load (our unfinished jobs there
plus other clients' live jobs, over its RUN capacity). Each server's results cursor is
followed by one long-poll loop, starting at the server's newest cursor, and only results of
jobs this pool placed there are passed on.

A server is declared dead only when its health route has failed for `dead_after_s` without
a break: a slow answer, a 503 or a lost connection in between is retried, never a reason to
run its jobs twice. A dead server's unfinished jobs are resubmitted to the others under the
same job ids (each server has its own store, so the ids are free there); jobs a submit could
not confirm on one server are placed on another the same way. Either way, the ids moved away
are cancelled on the old server as soon as it answers again, and a dead server that answers
again rejoins the pool.

Nothing fails silently: a results feed that keeps failing for a reason waiting does not cure
(answers that cannot be read) surfaces from `next_result` as `FeedError` naming the server;
the health loop and the feeds back off and retry every other error.

Backend registration and pause/resume are sent to every live server at once and succeed only
if all of them do (`fan_out`).
"""

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentroll.server.schema import (
    DEFAULT_POLICY,
    BackendSpec,
    BackendView,
    JobRequest,
    PauseMode,
    PauseResponse,
    StatusResponse,
    Trajectory,
)
from agentroll.trainer_clients.client import AsyncRolloutClient, JobLike, as_requests
from agentroll.trainer_clients.errors import (
    ApiError,
    ClientError,
    FanOutError,
    FeedError,
    NoServerAvailable,
    ServerUnavailable,
)
from agentroll.trainer_clients.members import Failover, Member, read_server_list

log = logging.getLogger("agentroll.trainer_clients")
T = TypeVar("T")


class AsyncServerPool:
    """Several agentroll servers as one: placement by load, failover, barrier fan-out.

    Use it started (`async with`, or `await start()`). Calls raise `NoServerAvailable` once
    every server is dead; `submit` raises a server's refusal (`ApiError`), the barriers
    (`fan_out` and the calls built on it) raise `FanOutError`. A server whose health route
    fails for `dead_after_s` is failed over, never raised; `next_result` raises `FeedError`
    when a server's results cannot be read `max_feed_errors` times in a row.
    """

    def __init__(
        self,
        servers: Sequence[str | AsyncRolloutClient] | str | Path,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        health_interval_s: float = 1.0,
        max_failures: int = 2,
        retry_delay_s: float = 0.25,
        poll_wait_s: float = 5.0,
        page_limit: int = 500,
        dead_after_s: float = 30.0,
        max_feed_errors: int = 5,
        max_backoff_s: float = 5.0,
    ) -> None:
        """`servers`: URLs, existing clients (not closed by the pool), or a server-list file.

        `max_failures`: tries of one submit or barrier call before it gives up on a server;
        `dead_after_s`: how long the health route must fail without a break before the
        server is declared dead; retries back off from `retry_delay_s` to `max_backoff_s`."""
        if isinstance(servers, (str, Path)):
            servers = read_server_list(servers)
        if not servers:
            raise ValueError("give at least one server")
        self.members = [
            Member(s.base_url, s, owned=False)
            if isinstance(s, AsyncRolloutClient)
            else Member(
                s.rstrip("/"), AsyncRolloutClient(s, token=token, timeout_s=timeout_s), True
            )
            for s in servers
        ]
        self.health_interval_s = health_interval_s
        self.max_failures = max_failures
        self.dead_after_s = dead_after_s
        self.max_feed_errors = max_feed_errors
        self.max_backoff_s = max_backoff_s
        self.retry_delay_s = retry_delay_s
        self.poll_wait_s = poll_wait_s
        self.page_limit = page_limit
        self.failovers: list[Failover] = []
        self.policy_version: int | None = None
        """The version of the last `resume`, or the newest any server reported at start."""
        self.policy_versions: dict[str, int] = {}
        """The same per policy, for every policy a `resume` or a server named."""
        self._queue: asyncio.Queue[Trajectory] = asyncio.Queue()
        self._stranded: list[JobRequest] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._health: asyncio.Task[None] | None = None
        self._fault: ClientError | None = None

    # -- life -----------------------------------------------------------------------------
    async def start(self) -> "AsyncServerPool":
        """Connect to every server (the unreachable ones start dead) and follow their results;
        returns self. `NoServerAvailable` if none answers."""
        await asyncio.gather(*(self._connect(m) for m in self.members))
        if not self.alive():
            raise NoServerAvailable(f"no server answered: {[m.url for m in self.members]}")
        self._health = asyncio.create_task(self._health_loop(), name="pool-health")
        return self

    async def _connect(self, member: Member) -> None:
        try:
            status = await member.client.status()
        except ServerUnavailable as exc:
            log.warning("server %s unreachable at start: %s", member.url, exc)
            member.alive = False
            return
        member.cursor = status.results_cursor
        self._note_status(member, status)
        self._note_versions(status)
        self._start_following(member)

    def _note_versions(self, status: StatusResponse) -> None:
        if status.policy_version and (self.policy_version or 0) < status.policy_version:
            self.policy_version = status.policy_version  # joining a run already under way
        for name, policy in status.policies.items():
            if self.policy_versions.get(name, 0) <= policy.policy_version:
                self.policy_versions[name] = policy.policy_version

    def _start_following(self, member: Member) -> None:
        member.follower = asyncio.create_task(self._follow(member), name=f"follow:{member.url}")

    async def close(self) -> None:
        """Stop following the servers and close the clients the pool created."""
        tasks = [t for t in (self._health, *(m.follower for m in self.members)) if t is not None]
        for task in [*tasks, *self._tasks]:
            task.cancel()
        await asyncio.gather(*tasks, *self._tasks, return_exceptions=True)
        for member in self.members:
            if member.owned:
                await member.client.close()

    async def __aenter__(self) -> "AsyncServerPool":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def alive(self) -> list[Member]:
        """The servers not declared dead, in the order given."""
        return [m for m in self.members if m.alive]

    # -- jobs -----------------------------------------------------------------------------
    async def submit(self, jobs: Iterable[JobLike]) -> None:
        """Place jobs (a group stays on one server); results arrive through `next_result`.

        Every job needs a `job_id` (`ValueError`); a server's refusal is raised as its
        `ApiError` (the first, if several refuse).
        """
        await self._place(as_requests(jobs))

    async def _place(self, requests: list[JobRequest]) -> None:
        by_group: dict[str, list[JobRequest]] = defaultdict(list)
        for request in requests:
            if request.job_id is None:
                raise ValueError("jobs sent through a pool need a job_id")
            by_group[request.group_id or request.job_id].append(request)
        plan: dict[Member, list[JobRequest]] = defaultdict(list)
        for group in by_group.values():
            candidates = self.alive()
            if not candidates:
                self._stranded += group
                continue
            member = min(candidates, key=lambda m: m.load)
            member.jobs.update({r.job_id: r for r in group if r.job_id})  # before any result
            member.moved -= {r.job_id for r in group if r.job_id}
            plan[member] += group
        outcomes = await asyncio.gather(*(self._send(m, rs) for m, rs in plan.items()))
        errors = [e for e in outcomes if e is not None]
        if errors:  # a refusal first: it names the request's own problem
            raise min(errors, key=lambda e: not isinstance(e, ApiError))

    async def _send(
        self, member: Member, requests: list[JobRequest], tried: frozenset[str] = frozenset()
    ) -> ApiError | ServerUnavailable | None:
        unconfirmed: ServerUnavailable | None = None
        for attempt in range(self.max_failures):
            try:
                submitted = await member.client.submit(requests)
            except ServerUnavailable as exc:
                unconfirmed = exc
                await asyncio.sleep(self._backoff(attempt))
                continue
            except ApiError as exc:  # refused (conflict, invalid, full): the caller must know
                for r in requests:
                    member.jobs.pop(r.job_id or "", None)
                exc.server = member.url
                return exc
            # an id this server finished before our cursor starts: fetch that result directly
            done = [s.job_id for s in submitted if not s.created and s.state.terminal]
            if done:
                self._spawn(self._fetch_finished(member, done))
            return None
        return await self._place_elsewhere(member, requests, unconfirmed, tried | {member.url})

    async def _place_elsewhere(
        self,
        member: Member,
        requests: list[JobRequest],
        cause: ServerUnavailable | None,
        tried: frozenset[str],
    ) -> ApiError | ServerUnavailable | None:
        """The submit may or may not have reached `member`: run the jobs on another server
        and cancel them on this one once it answers (never twice to completion)."""
        ids = {r.job_id for r in requests if r.job_id}
        for job_id in ids:
            member.jobs.pop(job_id, None)
        others = [m for m in self.alive() if m.url not in tried]
        if not others:  # the caller sends them again under the same ids: idempotent there
            return ServerUnavailable(f"submit to {member.url} unconfirmed: {cause}")
        member.moved |= ids
        target = min(others, key=lambda m: m.load)
        target.jobs.update({r.job_id: r for r in requests if r.job_id})
        return await self._send(target, requests, tried)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry_delay_s * 2**attempt, self.max_backoff_s))

    async def _fetch_finished(self, member: Member, job_ids: list[str]) -> None:
        for job_id in job_ids:
            with contextlib.suppress(ServerUnavailable, ApiError):
                result = await member.client.result(job_id)
                if result is not None and member.jobs.pop(job_id, None) is not None:
                    self._queue.put_nowait(result)

    async def next_result(self, timeout_s: float | None = None) -> Trajectory | None:
        """The next finished trajectory of a job this pool placed, or None after `timeout_s`;
        `NoServerAvailable` once every server is dead and none is left to come, `FeedError`
        once a server's results cannot be read."""
        if self._queue.empty():
            self._raise_if_stranded()
        try:  # not wait_for: on 3.11 it can swallow a cancel that races with the result
            async with asyncio.timeout(timeout_s):
                return await self._queue.get()
        except TimeoutError:
            self._raise_if_stranded()
            return None

    def _raise_if_stranded(self) -> None:
        if self._fault is not None:
            raise self._fault
        if not self.alive():
            raise NoServerAvailable(
                f"every server is dead ({len(self._stranded)} job(s) could not be placed)"
            )

    async def cancel(self, job_ids: Iterable[str]) -> list[str]:
        """Cancel jobs wherever they were placed; their results are no longer passed on.

        Returns the ids the servers cancelled; a server's failure is logged, not raised.
        """
        by_member: dict[Member, list[str]] = defaultdict(list)
        for job_id in job_ids:
            for member in self.members:
                if member.jobs.pop(job_id, None) is not None and member.alive:
                    by_member[member].append(job_id)
        found = await asyncio.gather(
            *(self._quiet(m.client.cancel_where(job_ids=ids)) for m, ids in by_member.items())
        )
        return [job_id for ids in found if ids for job_id in ids]

    @staticmethod
    async def _quiet(call: Awaitable[T]) -> T | None:
        try:
            return await call
        except (ServerUnavailable, ApiError) as exc:
            log.warning("ignored: %s", exc)
            return None

    def unfinished(self) -> int:
        """Jobs placed whose results have not been passed on yet."""
        return sum(len(m.jobs) for m in self.members)

    # -- failure --------------------------------------------------------------------------
    async def _follow(self, member: Member) -> None:
        """One long-poll loop over this server's results cursor. A server that does not
        answer is retried with backoff (the health loop decides whether it is dead); answers
        that cannot be read `max_feed_errors` times in a row stop the pool (`FeedError`)."""
        unreadable = 0
        attempt = 0
        while member.alive:
            try:
                page = await member.client.results(member.cursor, self.page_limit, self.poll_wait_s)
            except ServerUnavailable as exc:
                log.warning("results from %s: %s", member.url, exc)
            except ApiError as exc:
                unreadable += 1
                log.warning("results from %s (%d in a row): %s", member.url, unreadable, exc)
                if unreadable >= self.max_feed_errors:
                    self._fault = FeedError(member.url, exc, unreadable)
                    return
            else:
                unreadable = attempt = 0
                for trajectory in page.results:
                    if member.jobs.pop(trajectory.job_id, None) is not None:
                        self._queue.put_nowait(trajectory)
                member.cursor = page.next_cursor
                continue
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            checks = await asyncio.gather(
                *(self._check(m) for m in self.members), return_exceptions=True
            )
            for member, failure in zip(self.members, checks, strict=True):
                if isinstance(failure, Exception):  # a bug here must not end the checks
                    log.error("health check of %s: %r", member.url, failure)

    async def _check(self, member: Member) -> None:
        try:
            async with asyncio.timeout(max(self.health_interval_s * 3, 2.0)):
                status = await member.client.status()
        except (ClientError, TimeoutError) as exc:
            self._failed(member, exc)
            return
        member.failing_since = None
        self._note_status(member, status)
        if member.moved and not await self._cancel_moved(member):
            return
        if not member.alive:
            log.warning("server %s answers again: it rejoins the pool", member.url)
            member.alive = True
            member.cursor = status.results_cursor
            self._start_following(member)

    async def _cancel_moved(self, member: Member) -> bool:
        """Cancel there the jobs that now run elsewhere; True once done."""
        moved = sorted(member.moved)
        try:
            await member.client.cancel_where(job_ids=moved)
        except ClientError as exc:
            log.warning("cancelling %d moved job(s) on %s: %s", len(moved), member.url, exc)
            return False
        member.moved -= set(moved)
        return True

    def _note_status(self, member: Member, status: StatusResponse) -> None:
        member.capacity = status.stages["run"].capacity if "run" in status.stages else 1
        live = sum(status.jobs_by_state.values())
        member.external = max(0, live - len(member.jobs))

    def _failed(self, member: Member, cause: BaseException) -> None:
        now = time.monotonic()
        if member.failing_since is None:
            member.failing_since = now
            log.warning("health of %s: %r", member.url, cause)
        if member.alive and now - member.failing_since >= self.dead_after_s:
            self._declare_dead(member)

    def _declare_dead(self, member: Member) -> None:
        member.alive = False
        orphans = list(member.jobs.values())
        member.jobs.clear()
        member.moved |= {r.job_id for r in orphans if r.job_id}
        failover = Failover(member.url, time.monotonic(), len(orphans))
        self.failovers.append(failover)
        log.warning("server %s is dead; resubmitting %d job(s)", member.url, len(orphans))
        if member.follower is not None and member.follower is not asyncio.current_task():
            member.follower.cancel()
        self._spawn(self._resubmit(orphans, failover))

    async def _resubmit(self, orphans: list[JobRequest], failover: Failover) -> None:
        try:
            await self._place(orphans)
        except ClientError as exc:  # the jobs' results will never come: say so, do not stall
            self._fault = FeedError(failover.url, exc, 1)
            log.error("resubmitting the jobs of %s failed: %s", failover.url, exc)
        failover.resubmitted_at = time.monotonic()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- barriers -------------------------------------------------------------------------
    async def fan_out(
        self, what: str, call: Callable[[AsyncRolloutClient], Awaitable[T]]
    ) -> dict[str, T]:
        """Send one call to every live server at once; all must succeed (FanOutError if not).

        A server that does not answer `max_failures` tries, or answers an error, fails the
        barrier (only its health route decides that it is dead).
        """

        async def one(member: Member) -> T | Exception:
            unanswered: Exception = ServerUnavailable(f"{member.url}: no answer")
            for attempt in range(self.max_failures):
                try:
                    return await call(member.client)
                except ServerUnavailable as exc:
                    unanswered = exc
                    await asyncio.sleep(self._backoff(attempt))
                except ApiError as exc:
                    return exc
            return unanswered

        members = self.alive()
        if not members:
            raise NoServerAvailable(f"{what}: every server is dead")
        answers = await asyncio.gather(*(one(m) for m in members))
        ok: dict[str, Any] = {}
        failed: dict[str, Exception] = {}
        for member, answer in zip(members, answers, strict=True):
            if isinstance(answer, Exception):
                failed[member.url] = answer
            elif member.alive:
                ok[member.url] = answer
        if failed:
            raise FanOutError(what, ok, failed)
        return ok

    async def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> dict[str, BackendView]:
        """Register one inference server with every rollout server; each one's view by URL."""
        parsed = BackendSpec.model_validate(spec)
        return await self.fan_out("add_backend", lambda c: c.add_backend(parsed))

    async def remove_backend(self, backend_id: str) -> None:
        """Unregister an inference server from every rollout server (`fan_out` errors)."""
        await self.fan_out("remove_backend", lambda c: c.remove_backend(backend_id))

    async def pause(
        self, mode: PauseMode = "wait", timeout_s: float = 60.0, *, policy: str | None = None
    ) -> dict[str, PauseResponse]:
        """Weight-sync barrier: returns once every live server has paused generation (of
        `policy` only, when named); each one's answer by URL (see `AsyncRolloutClient.pause`
        for the modes)."""
        return await self.fan_out("pause", lambda c: c.pause(mode, timeout_s, policy=policy))

    async def resume(
        self, policy_version: int, max_policy_lag: int | None = None, *, policy: str | None = None
    ) -> dict[str, PauseResponse]:
        """Resume every live server with the new version (of `policy`, when named); each one's
        answer by URL."""
        try:
            answers = await self.fan_out(
                "resume", lambda c: c.resume(policy_version, max_policy_lag, policy=policy)
            )
        except FanOutError as exc:
            if exc.succeeded:  # some servers now sample the new version: samples will say so
                self._resumed(policy, policy_version)
            raise
        self._resumed(policy, policy_version)
        return answers

    def _resumed(self, policy: str | None, version: int) -> None:
        name = policy or DEFAULT_POLICY
        self.policy_versions[name] = max(version, self.policy_versions.get(name, version))
        if name == DEFAULT_POLICY:
            self.policy_version = max(version, self.policy_version or 0)

    async def statuses(self) -> dict[str, StatusResponse]:
        """Every live server's status by URL (`fan_out` errors)."""
        return await self.fan_out("status", lambda c: c.status())

    def stats(self) -> dict[str, Any]:
        """Counters to log: servers (alive), unfinished jobs, load per server, failovers."""
        return {
            "servers": len(self.members),
            "servers_alive": len(self.alive()),
            "unfinished_jobs": self.unfinished(),
            "load": {m.url: round(m.load, 3) for m in self.alive()},
            "failovers": len(self.failovers),
        }
