"""`AsyncRolloutClient` and `RolloutClient`: a trainer's handle on one agentroll server.

Both send the same `calls` (one description of each endpoint) and return the schema
models the server itself uses. Only pydantic and httpx are needed.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from agentroll.server.schema import (
    BackendSpec,
    BackendView,
    CancelFilter,
    JobRequest,
    JobView,
    PauseMode,
    PauseResponse,
    PoolSizes,
    PoolsPatch,
    ResultsPage,
    StatusResponse,
    SubmittedJob,
    Trajectory,
)
from agentroll.trainer_clients import calls
from agentroll.trainer_clients.calls import Call
from agentroll.trainer_clients.errors import ServerUnavailable, error_from_response

T = TypeVar("T")
JobLike = JobRequest | Mapping[str, Any]
SUBMIT_BATCH = 1000


def as_requests(jobs: Iterable[JobLike]) -> list[JobRequest]:
    return [j if isinstance(j, JobRequest) else JobRequest.model_validate(j) for j in jobs]


def _batches(requests: list[JobRequest]) -> Iterator[list[JobRequest]]:
    for start in range(0, len(requests), SUBMIT_BATCH):
        yield requests[start : start + SUBMIT_BATCH]


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _stale_connection(call: Call[Any], exc: httpx.TransportError) -> bool:
    """A kept-alive connection the server closed in between: one more try is safe for calls
    that may be repeated (the request may or may not have been seen)."""
    closed = isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError | httpx.WriteError)
    return closed and call.retryable


def _finish(call: Call[T], response: httpx.Response) -> T:
    body = response.json() if response.content else None
    if response.status_code == 503:
        raise ServerUnavailable(f"server unavailable: {body}")
    if response.status_code not in call.ok:
        raise error_from_response(response.status_code, body)
    return call.parse(response.status_code, body)


class AsyncRolloutClient:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=_headers(token), transport=transport
        )

    async def __aenter__(self) -> "AsyncRolloutClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        for attempt in range(2):
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    timeout=self._timeout_s + call.timeout_extra_s,
                )
                return _finish(call, response)
            except httpx.TransportError as exc:
                if not (attempt == 0 and _stale_connection(call, exc)):
                    raise ServerUnavailable(f"{self.base_url}: {exc!r}") from exc
        raise AssertionError("unreachable")

    async def submit(self, jobs: Iterable[JobLike]) -> list[SubmittedJob]:
        """Submit jobs in batches; resubmitting the same `job_id` is safe."""
        out: list[SubmittedJob] = []
        for batch in _batches(as_requests(jobs)):
            out += (await self.send(calls.submit(batch))).jobs
        return out

    async def job(self, job_id: str) -> JobView:
        return await self.send(calls.job(job_id))

    async def result(self, job_id: str, wait: float = 0.0) -> Trajectory | None:
        """The finished trajectory, or None if still running after `wait` seconds."""
        return await self.send(calls.result(job_id, wait))

    async def wait_for(
        self, job_ids: Sequence[str], timeout_s: float, *, concurrency: int = 32
    ) -> dict[str, Trajectory]:
        """Results of the given jobs; raises TimeoutError if any is unfinished in time."""
        deadline = time.monotonic() + timeout_s
        gate = asyncio.Semaphore(concurrency)

        async def one(job_id: str) -> Trajectory:
            async with gate:
                while (left := deadline - time.monotonic()) > 0:
                    found = await self.result(job_id, wait=min(left, 30.0))
                    if found is not None:
                        return found
            raise TimeoutError(f"job {job_id} unfinished after {timeout_s:g} s")

        found = await asyncio.gather(*(one(i) for i in job_ids))
        return {t.job_id: t for t in found}

    async def results(self, after: int = 0, limit: int = 100, wait: float = 0.0) -> ResultsPage:
        return await self.send(calls.results(after, limit, wait))

    async def iter_results(
        self, after: int = 0, *, wait: float = 30.0, limit: int = 100
    ) -> AsyncIterator[Trajectory]:
        """Follow the durable results cursor forever (break out when you have enough).

        Each trajectory's `cursor` is what to pass as `after` to resume exactly there.
        """
        cursor = after
        while True:
            page = await self.results(cursor, limit, wait)
            for trajectory in page.results:
                yield trajectory
            cursor = page.next_cursor

    async def cancel(self, job_id: str) -> list[str]:
        return (await self.send(calls.cancel(job_id))).cancelled

    async def cancel_where(
        self,
        *,
        group_id: str | None = None,
        job_ids: Sequence[str] | None = None,
        all: bool = False,
    ) -> list[str]:
        selector = CancelFilter(
            group_id=group_id, job_ids=None if job_ids is None else list(job_ids), all=all
        )
        return (await self.send(calls.cancel_where(selector))).cancelled

    async def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> BackendView:
        return await self.send(calls.add_backend(BackendSpec.model_validate(spec)))

    async def backends(self) -> list[BackendView]:
        return await self.send(calls.list_backends())

    async def remove_backend(self, backend_id: str) -> None:
        await self.send(calls.remove_backend(backend_id))

    async def status(self) -> StatusResponse:
        return await self.send(calls.status())

    async def pause(self, mode: PauseMode = "wait", timeout_s: float = 60.0) -> PauseResponse:
        """Stop generation on every backend of this server (around a weight update)."""
        return await self.send(calls.pause(mode, timeout_s))

    async def resume(self, policy_version: int, max_policy_lag: int | None = None) -> PauseResponse:
        """Resume generation; segments sampled from now on carry `policy_version`."""
        return await self.send(calls.resume(policy_version, max_policy_lag))

    async def resize_pools(self, **sizes: int) -> PoolSizes:
        return await self.send(calls.resize_pools(PoolsPatch(**sizes)))

    async def shutdown(self) -> None:
        await self.send(calls.shutdown())


class RolloutClient:
    """The blocking twin of `AsyncRolloutClient`, for scripts and synchronous trainers."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url, headers=_headers(token), transport=transport
        )

    def __enter__(self) -> "RolloutClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        for attempt in range(2):
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    timeout=self._timeout_s + call.timeout_extra_s,
                )
                return _finish(call, response)
            except httpx.TransportError as exc:
                if not (attempt == 0 and _stale_connection(call, exc)):
                    raise ServerUnavailable(f"{self.base_url}: {exc!r}") from exc
        raise AssertionError("unreachable")

    def submit(self, jobs: Iterable[JobLike]) -> list[SubmittedJob]:
        out: list[SubmittedJob] = []
        for batch in _batches(as_requests(jobs)):
            out += self.send(calls.submit(batch)).jobs
        return out

    def job(self, job_id: str) -> JobView:
        return self.send(calls.job(job_id))

    def result(self, job_id: str, wait: float = 0.0) -> Trajectory | None:
        return self.send(calls.result(job_id, wait))

    def wait_for(self, job_ids: Sequence[str], timeout_s: float) -> dict[str, Trajectory]:
        deadline = time.monotonic() + timeout_s
        found: dict[str, Trajectory] = {}
        for job_id in job_ids:
            while job_id not in found:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} unfinished after {timeout_s:g} s")
                if (trajectory := self.result(job_id, wait=min(left, 30.0))) is not None:
                    found[job_id] = trajectory
        return found

    def results(self, after: int = 0, limit: int = 100, wait: float = 0.0) -> ResultsPage:
        return self.send(calls.results(after, limit, wait))

    def iter_results(
        self, after: int = 0, *, wait: float = 30.0, limit: int = 100
    ) -> Iterator[Trajectory]:
        cursor = after
        while True:
            page = self.results(cursor, limit, wait)
            yield from page.results
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> list[str]:
        return self.send(calls.cancel(job_id)).cancelled

    def cancel_where(
        self,
        *,
        group_id: str | None = None,
        job_ids: Sequence[str] | None = None,
        all: bool = False,
    ) -> list[str]:
        selector = CancelFilter(
            group_id=group_id, job_ids=None if job_ids is None else list(job_ids), all=all
        )
        return self.send(calls.cancel_where(selector)).cancelled

    def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> BackendView:
        return self.send(calls.add_backend(BackendSpec.model_validate(spec)))

    def backends(self) -> list[BackendView]:
        return self.send(calls.list_backends())

    def remove_backend(self, backend_id: str) -> None:
        self.send(calls.remove_backend(backend_id))

    def status(self) -> StatusResponse:
        return self.send(calls.status())

    def pause(self, mode: PauseMode = "wait", timeout_s: float = 60.0) -> PauseResponse:
        return self.send(calls.pause(mode, timeout_s))

    def resume(self, policy_version: int, max_policy_lag: int | None = None) -> PauseResponse:
        return self.send(calls.resume(policy_version, max_policy_lag))

    def resize_pools(self, **sizes: int) -> PoolSizes:
        return self.send(calls.resize_pools(PoolsPatch(**sizes)))

    def shutdown(self) -> None:
        self.send(calls.shutdown())
