"""`ServerPool` and `GroupCollector`: blocking twins of the async pool and collector.

Each pool owns one background event loop (`LoopThread`) where the async pool and any
collectors built on it run; calls from the trainer's thread wait for their answer there.
"""

from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentroll.server.schema import (
    BackendSpec,
    BackendView,
    JobRequest,
    PauseMode,
    PauseResponse,
    StatusResponse,
    Trajectory,
)
from agentroll.trainer_clients.client import JobLike
from agentroll.trainer_clients.collector import AsyncGroupCollector
from agentroll.trainer_clients.dynamic import AsyncDynamicSampler, Batch
from agentroll.trainer_clients.groups import CollectorStats, Group, GroupSpec
from agentroll.trainer_clients.loop_thread import LoopThread
from agentroll.trainer_clients.server_pool import AsyncServerPool, Failover

CALL_TIMEOUT_S = 600.0
T = TypeVar("T")


class ServerPool:
    """Several agentroll servers as one (see `AsyncServerPool`); started on construction.

    Same options, methods and errors as `AsyncServerPool`; each call blocks on the pool's
    loop thread, `TimeoutError` after `CALL_TIMEOUT_S` unless the method says otherwise.
    """

    def __init__(self, servers: Sequence[str] | str | Path, **options: Any) -> None:
        self._loop = LoopThread("agentroll-pool")
        try:
            self.aio = self._loop.run(self._start(servers, options), CALL_TIMEOUT_S)
        except BaseException:
            self._loop.close()
            raise

    @staticmethod
    async def _start(
        servers: Sequence[str] | str | Path, options: dict[str, Any]
    ) -> AsyncServerPool:
        return await AsyncServerPool(servers, **options).start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = CALL_TIMEOUT_S) -> T:
        """Run a coroutine on the pool's loop (e.g. one of `aio`'s) and wait for its result."""
        return self._loop.run(coro, timeout_s)

    def close(self) -> None:
        """Close the async pool, then stop its loop thread."""
        try:
            self.run(self.aio.close(), 60.0)
        finally:
            self._loop.close()

    def __enter__(self) -> "ServerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def urls(self) -> list[str]:
        """Every server's URL, dead ones included."""
        return [m.url for m in self.aio.members]

    @property
    def failovers(self) -> list[Failover]:
        """The servers declared dead so far, oldest first."""
        return list(self.aio.failovers)

    def submit(self, jobs: Iterable[JobLike]) -> None:
        """Place jobs (a group stays on one server); see `AsyncServerPool.submit`."""
        self.run(self.aio.submit(list(jobs)))

    def next_result(self, timeout_s: float | None = None) -> Trajectory | None:
        """The next finished trajectory of a job this pool placed, or None after
        `timeout_s`; `NoServerAvailable` once every server is dead."""
        wait = None if timeout_s is None else timeout_s + 30
        return self.run(self.aio.next_result(timeout_s), wait)

    def cancel(self, job_ids: Iterable[str]) -> list[str]:
        """Cancel jobs wherever they were placed; the ids the servers cancelled."""
        return self.run(self.aio.cancel(list(job_ids)))

    def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> dict[str, BackendView]:
        """Register one inference server with every rollout server; each view by URL.
        `FanOutError` if some refused."""
        return self.run(self.aio.add_backend(spec))

    def remove_backend(self, backend_id: str) -> None:
        """Unregister an inference server everywhere; `FanOutError` if some refused."""
        self.run(self.aio.remove_backend(backend_id))

    def pause(
        self, mode: PauseMode = "wait", timeout_s: float = 60.0, *, policy: str | None = None
    ) -> dict[str, PauseResponse]:
        """Weight-sync barrier: every live server paused (`policy` only, when named); each
        answer by URL. `FanOutError` if some did not pause."""
        return self.run(self.aio.pause(mode, timeout_s, policy=policy), timeout_s + 60)

    def resume(
        self, policy_version: int, max_policy_lag: int | None = None, *, policy: str | None = None
    ) -> dict[str, PauseResponse]:
        """Resume every live server with the new version (of `policy`, when named); each
        answer by URL. `FanOutError` if some refused."""
        return self.run(self.aio.resume(policy_version, max_policy_lag, policy=policy))

    def statuses(self) -> dict[str, StatusResponse]:
        """Every live server's status by URL."""
        return self.run(self.aio.statuses())

    def stats(self) -> dict[str, Any]:
        """Counters to log (see `AsyncServerPool.stats`)."""
        return self.aio.stats()


class GroupCollector:
    """Blocking `AsyncGroupCollector`. Give it a `ServerPool`, a URL or a list of URLs."""

    def __init__(self, servers: ServerPool | str | Sequence[str] | Path, **options: Any) -> None:
        self._own_pool = not isinstance(servers, ServerPool)
        self.pool = (
            servers
            if isinstance(servers, ServerPool)
            else ServerPool([servers] if isinstance(servers, str) else servers)
        )
        self.aio = AsyncGroupCollector(self.pool.aio, **options)
        self.pool.run(self.aio.start())

    def close(self) -> None:
        """Stop collecting (running jobs are cancelled); closes the pool if it made it."""
        try:
            self.pool.run(self.aio.close(), 60.0)
        finally:
            if self._own_pool:
                self.pool.close()

    def __enter__(self) -> "GroupCollector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> CollectorStats:
        """The running counters (see `CollectorStats`)."""
        return self.aio.stats

    @property
    def pending(self) -> int:
        """Groups submitted and not finished yet."""
        return self.aio.pending

    @property
    def policy_version(self) -> int:
        """The live policy version (see `AsyncGroupCollector.policy_version`)."""
        return self.aio.policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self.aio.policy_version = version

    def submit(self, group_id: str, request: JobRequest | Mapping[str, Any], n: int) -> None:
        """Start a group of `n` samples (plus `oversample` spares) of one request."""
        self.pool.run(self.aio.submit(group_id, request, n))

    def submit_groups(self, specs: Iterable[GroupSpec]) -> None:
        """Start several groups (see `AsyncGroupCollector.submit_groups`)."""
        self.pool.run(self.aio.submit_groups(list(specs)))

    def next_group(self, timeout_s: float | None = None) -> Group | None:
        """The next finished group (valid or not), or None after `timeout_s`."""
        wait = None if timeout_s is None else timeout_s + 30
        return self.pool.run(self.aio.next_group(timeout_s), wait)

    def groups(self, *, timeout_s: float = 3600.0) -> Iterator[Group]:
        """Every submitted group as it finishes (see `AsyncGroupCollector.groups`)."""
        while self.aio.has_more():
            group = self.next_group(timeout_s)
            if group is None:
                raise TimeoutError(f"no group finished in {timeout_s:g} s ({self.pending} pending)")
            yield group

    def collect(self, specs: Iterable[GroupSpec], *, timeout_s: float = 3600.0) -> list[Group]:
        """Submit groups and wait for all of them (valid or not), in completion order."""
        self.submit_groups(specs)
        return list(self.groups(timeout_s=timeout_s))


class DynamicSampler:
    """Blocking `AsyncDynamicSampler` over a `GroupCollector` (same options and errors).

    The stream is read on the pool's loop thread: a curriculum's records written from the
    trainer's thread between batches are seen by the next one.
    """

    def __init__(
        self, collector: GroupCollector, specs: Iterable[GroupSpec], **options: Any
    ) -> None:
        self.collector = collector
        self.aio = AsyncDynamicSampler(collector.aio, specs, **options)

    def next_batch(self, size: int, *, timeout_s: float = 3600.0) -> Batch:
        """The next `size` groups with unequal rewards (see `AsyncDynamicSampler`)."""
        return self.collector.pool.run(self.aio.next_batch(size, timeout_s=timeout_s), None)
