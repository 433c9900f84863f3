"""`AsyncServerPool`: one trainer's view of several agentroll servers.

Groups are placed whole on the live server with the lowest load (our unfinished jobs there
plus other clients' live jobs, over its RUN capacity). Each server's results cursor is
followed by one long-poll loop, starting at the server's newest cursor, and only results of
jobs this pool placed there are passed on. A server that fails `max_failures` calls in a
row (results poll, health check, submit) is declared dead, and its unfinished jobs are
resubmitted to the others under the same job ids: each server has its own store, so the ids
are free there. Backend registration and pause/resume are sent to every live server at once
and succeed only if all of them do (`fan_out`).

A dead server stays out of the pool for its lifetime; start a new pool to take it back.
"""

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
    FanOutError,
    NoServerAvailable,
    ServerUnavailable,
)

log = logging.getLogger("agentroll.trainer_clients")
T = TypeVar("T")


def read_server_list(path: str | Path) -> list[str]:
    """Server URLs from a file, one per line (blank lines and `#` comments skipped)."""
    urls: list[str] = []
    for line in Path(path).read_text().splitlines():
        url = line.split("#", 1)[0].strip().rstrip("/")
        if url and url not in urls:
            urls.append(url)
    if not urls:
        raise ValueError(f"no server URL in {path}")
    return urls


@dataclass
class Failover:
    """One server declared dead: when it was noticed and when its jobs were placed again."""

    url: str
    noticed_at: float
    jobs: int
    resubmitted_at: float | None = None

    @property
    def resubmit_s(self) -> float | None:
        """Seconds from noticing the death to placing its jobs again (None: not yet)."""
        return None if self.resubmitted_at is None else self.resubmitted_at - self.noticed_at


@dataclass(eq=False)
class Member:
    url: str
    client: AsyncRolloutClient
    owned: bool
    alive: bool = True
    failures: int = 0
    jobs: dict[str, JobRequest] = field(default_factory=dict)
    """Jobs this pool placed here whose results it has not seen yet."""
    capacity: int = 1
    external: int = 0
    cursor: int = 0
    follower: "asyncio.Task[None] | None" = None

    @property
    def load(self) -> float:
        return (len(self.jobs) + self.external) / max(self.capacity, 1)


class AsyncServerPool:
    """Several agentroll servers as one: placement by load, failover, barrier fan-out.

    Use it started (`async with`, or `await start()`). Calls raise `NoServerAvailable` once
    every server is dead; `submit` raises a server's refusal (`ApiError`), the barriers
    (`fan_out` and the calls built on it) raise `FanOutError`. A server that stops answering
    is failed over, never raised.
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
    ) -> None:
        """`servers`: URLs, existing clients (not closed by the pool), or a server-list file."""
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
        if status.policy_version and (self.policy_version or 0) < status.policy_version:
            self.policy_version = status.policy_version  # joining a run already under way
        for name, policy in status.policies.items():
            if self.policy_versions.get(name, 0) <= policy.policy_version:
                self.policy_versions[name] = policy.policy_version
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
            plan[member] += group
        outcomes = await asyncio.gather(*(self._send(m, rs) for m, rs in plan.items()))
        errors = [e for e in outcomes if e is not None]
        if errors:
            raise errors[0]

    async def _send(self, member: Member, requests: list[JobRequest]) -> ApiError | None:
        for _ in range(self.max_failures):
            try:
                submitted = await member.client.submit(requests)
            except ServerUnavailable:
                await asyncio.sleep(self.retry_delay_s)
                continue
            except ApiError as exc:  # refused (conflict, invalid, full): the caller must know
                for r in requests:
                    member.jobs.pop(r.job_id or "", None)
                return exc
            member.failures = 0
            # an id this server finished before our cursor starts: fetch that result directly
            done = [s.job_id for s in submitted if not s.created and s.state.terminal]
            if done:
                self._spawn(self._fetch_finished(member, done))
            return None
        if member.alive:
            self._declare_dead(member)  # moves these requests (and all its others) elsewhere
        return None

    async def _fetch_finished(self, member: Member, job_ids: list[str]) -> None:
        for job_id in job_ids:
            with contextlib.suppress(ServerUnavailable, ApiError):
                result = await member.client.result(job_id)
                if result is not None and member.jobs.pop(job_id, None) is not None:
                    self._queue.put_nowait(result)

    async def next_result(self, timeout_s: float | None = None) -> Trajectory | None:
        """The next finished trajectory of a job this pool placed, or None after `timeout_s`;
        `NoServerAvailable` once every server is dead and none is left to come."""
        if self._queue.empty():
            self._raise_if_stranded()
        try:
            return await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            self._raise_if_stranded()
            return None

    def _raise_if_stranded(self) -> None:
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
        """One long-poll loop over this server's results cursor."""
        while member.alive:
            try:
                page = await member.client.results(member.cursor, self.page_limit, self.poll_wait_s)
            except ServerUnavailable:
                self._failed(member)
                await asyncio.sleep(self.retry_delay_s)
                continue
            except ApiError as exc:
                log.warning("results from %s: %s", member.url, exc)
                await asyncio.sleep(self.retry_delay_s)
                continue
            member.failures = 0
            for trajectory in page.results:
                if member.jobs.pop(trajectory.job_id, None) is not None:
                    self._queue.put_nowait(trajectory)
            member.cursor = page.next_cursor

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await asyncio.gather(*(self._check(m) for m in self.alive()))

    async def _check(self, member: Member) -> None:
        try:
            async with asyncio.timeout(max(self.health_interval_s * 3, 2.0)):
                status = await member.client.status()
        except (ServerUnavailable, TimeoutError):
            self._failed(member)
            return
        except ApiError as exc:
            log.warning("status of %s: %s", member.url, exc)
            return
        member.failures = 0
        self._note_status(member, status)

    def _note_status(self, member: Member, status: StatusResponse) -> None:
        member.capacity = status.stages["run"].capacity if "run" in status.stages else 1
        live = sum(status.jobs_by_state.values())
        member.external = max(0, live - len(member.jobs))

    def _failed(self, member: Member) -> None:
        member.failures += 1
        if member.alive and member.failures >= self.max_failures:
            self._declare_dead(member)

    def _declare_dead(self, member: Member) -> None:
        member.alive = False
        orphans = list(member.jobs.values())
        member.jobs.clear()
        failover = Failover(member.url, time.monotonic(), len(orphans))
        self.failovers.append(failover)
        log.warning("server %s is dead; resubmitting %d job(s)", member.url, len(orphans))
        if member.follower is not None and member.follower is not asyncio.current_task():
            member.follower.cancel()
        self._spawn(self._resubmit(orphans, failover))

    async def _resubmit(self, orphans: list[JobRequest], failover: Failover) -> None:
        try:
            await self._place(orphans)
        except ApiError as exc:
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

        A server that does not answer `max_failures` tries is declared dead (its jobs move)
        and leaves the barrier; an error answer fails the barrier.
        """

        async def one(member: Member) -> T | Exception | None:
            for _ in range(self.max_failures):
                try:
                    return await call(member.client)
                except ServerUnavailable:
                    await asyncio.sleep(self.retry_delay_s)
                except ApiError as exc:
                    return exc
            if member.alive:
                self._declare_dead(member)
            return None

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
        answers = await self.fan_out(
            "resume", lambda c: c.resume(policy_version, max_policy_lag, policy=policy)
        )
        self.policy_versions[policy or DEFAULT_POLICY] = policy_version
        if policy in (None, DEFAULT_POLICY):
            self.policy_version = policy_version
        return answers

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
