"""`AsyncRolloutClient` and `RolloutClient`: a trainer's handle on one agentroll server.

Both send the same `calls` (one description of each endpoint) and return the schema
models the server itself uses. Only pydantic and httpx are needed.
"""

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

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
from agentroll.trainer_clients.auth import FoundToken
from agentroll.trainer_clients.calls import Call
from agentroll.trainer_clients.errors import (
    InvalidResponse,
    ServerUnavailable,
    error_from_response,
)

T = TypeVar("T")
JobLike = JobRequest | Mapping[str, Any]
SUBMIT_BATCH = 1000


def as_requests(jobs: Iterable[JobLike]) -> list[JobRequest]:
    """`JobRequest`s from requests or plain dicts (pydantic's `ValidationError` if invalid)."""
    return [j if isinstance(j, JobRequest) else JobRequest.model_validate(j) for j in jobs]


def _batches(requests: list[JobRequest]) -> Iterator[list[JobRequest]]:
    for start in range(0, len(requests), SUBMIT_BATCH):
        yield requests[start : start + SUBMIT_BATCH]


def _request(call: Call[Any], timeout_s: float) -> dict[str, Any]:
    """httpx's `request` arguments for `call`: the same for both clients."""
    return {
        "method": call.method,
        "url": call.path,
        "json": call.json,
        "params": call.params,
        "timeout": timeout_s + call.timeout_extra_s,
    }


def _stale_connection(call: Call[Any], exc: httpx.TransportError) -> bool:
    """A kept-alive connection the server closed in between: one more try is safe for calls
    that may be repeated (the request may or may not have been seen)."""
    closed = isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError | httpx.WriteError)
    return closed and call.retryable


def _finish(call: Call[T], response: httpx.Response) -> T:
    status = response.status_code
    try:
        body = response.json() if response.content else None
    except ValueError:  # not JSON: a proxy's error page, a truncated answer
        if status >= 500:
            raise ServerUnavailable(f"{status} from {call.path}: {response.text[:200]!r}") from None
        raise InvalidResponse(
            status, "invalid_response", f"not JSON: {response.text[:200]!r}"
        ) from None
    if status == 503:
        raise ServerUnavailable(f"server unavailable: {body}")
    if status not in call.ok:
        raise error_from_response(status, body)
    try:
        return call.parse(status, body)
    except ValidationError as exc:
        raise InvalidResponse(status, "invalid_response", f"{call.path}: {exc}") from exc


def _cancel_filter(group_id: str | None, job_ids: Sequence[str] | None, all: bool) -> CancelFilter:
    return CancelFilter(
        group_id=group_id, job_ids=None if job_ids is None else list(job_ids), all=all
    )


class AsyncRolloutClient:
    """A trainer's handle on one agentroll server: every endpoint, as coroutines.

    `token` is the server's bearer token; without it the client reads `token_file`, else
    finds one as `resolve_token` says (`AGENTROLL_API_TOKEN`, `AGENTROLL_TOKEN_FILE`, the
    token a server on this machine's loopback generated in `var/api-token`). `timeout_s`
    bounds each request (long-polls add their wait); `transport` replaces httpx's (tests).
    Every call raises `ServerUnavailable` when the server does not answer or answers 503,
    and the `ApiError` subclass of a refusal (`InvalidRequest`, `NotFound`, `Conflict`,
    ...); each method names only what it adds.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=FoundToken(self.base_url, token, token_file),
            transport=transport,
        )

    async def __aenter__(self) -> "AsyncRolloutClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one described call (`agentroll.trainer_clients.calls`) and parse its answer.

        A call that may be repeated is retried once on a connection the server had closed.
        """
        for attempt in range(2):
            try:
                return _finish(call, await self._http.request(**_request(call, self._timeout_s)))
            except httpx.TransportError as exc:
                if not (attempt == 0 and _stale_connection(call, exc)):
                    raise ServerUnavailable(f"{self.base_url}: {exc!r}") from exc
        raise AssertionError("unreachable")

    async def submit(self, jobs: Iterable[JobLike]) -> list[SubmittedJob]:
        """Submit jobs (in batches of 1000); one `SubmittedJob` per job, in order.

        Resubmitting a `job_id` with the same request is safe (`created` is False);
        `Conflict` if the id was used for a different request.
        """
        out: list[SubmittedJob] = []
        for batch in _batches(as_requests(jobs)):
            out += (await self.send(calls.submit(batch))).jobs
        return out

    async def job(self, job_id: str) -> JobView:
        """The job's current state and timings; `NotFound` for an unknown id."""
        return await self.send(calls.job(job_id))

    async def result(self, job_id: str, wait: float = 0.0) -> Trajectory | None:
        """The finished trajectory, or None if still running after `wait` seconds;
        `NotFound` for an unknown id."""
        return await self.send(calls.result(job_id, wait))

    async def wait_for(
        self, job_ids: Sequence[str], timeout_s: float, *, concurrency: int = 32
    ) -> dict[str, Trajectory]:
        """Trajectories of the given jobs by job id, long-polling `concurrency` at a time;
        `TimeoutError` if any is unfinished after `timeout_s`."""
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
        """One page of the durable results feed after cursor `after` (at most `limit`),
        long-polling up to `wait` seconds for the first; `next_cursor` continues it."""
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
        """Cancel one job; the ids actually cancelled (empty if it had finished).
        `NotFound` for an unknown id."""
        return (await self.send(calls.cancel(job_id))).cancelled

    async def cancel_where(
        self,
        *,
        group_id: str | None = None,
        job_ids: Sequence[str] | None = None,
        all: bool = False,
    ) -> list[str]:
        """Cancel the unfinished jobs of a group, of a list of ids, or `all`; the ids
        cancelled (unknown and finished ids are skipped)."""
        selector = _cancel_filter(group_id, job_ids, all)
        return (await self.send(calls.cancel_where(selector))).cancelled

    async def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> BackendView:
        """Register an inference server; its view. `Conflict` if the id is taken by a
        different spec, `InvalidRequest` if the server cannot use it."""
        return await self.send(calls.add_backend(BackendSpec.model_validate(spec)))

    async def backends(self) -> list[BackendView]:
        """Every registered inference server with its state and load."""
        return await self.send(calls.list_backends())

    async def remove_backend(self, backend_id: str) -> None:
        """Unregister an inference server; `NotFound` for an unknown id."""
        await self.send(calls.remove_backend(backend_id))

    async def status(self) -> StatusResponse:
        """The server's health, stage capacities, job counts and results cursor."""
        return await self.send(calls.status())

    async def pause(
        self, mode: PauseMode = "wait", timeout_s: float = 60.0, *, policy: str | None = None
    ) -> PauseResponse:
        """Stop generation on every backend of this server (around a weight update).

        `mode`: `wait` lets in-flight generations finish, `abort` stops them (the turn goes on
        after resume), `keep` parks them in the backends. An `ApiError` with status 504 if
        the pause is not complete within `timeout_s`. `policy`: pause only that policy's
        backends and agents (default: the `default` policy, all a single-agent run has).
        """
        return await self.send(calls.pause(mode, timeout_s, policy))

    async def resume(
        self, policy_version: int, max_policy_lag: int | None = None, *, policy: str | None = None
    ) -> PauseResponse:
        """Resume generation; segments sampled from now on carry `policy_version` (of
        `policy`, default the `default` policy). `Conflict` if the version goes backwards."""
        return await self.send(calls.resume(policy_version, max_policy_lag, policy))

    async def resize_pools(self, **sizes: int) -> PoolSizes:
        """Change stage pool sizes (e.g. `run=64`); the sizes now in force."""
        return await self.send(calls.resize_pools(PoolsPatch(**sizes)))

    async def shutdown(self) -> None:
        """Ask the server to stop accepting jobs and shut down (202: it happens after)."""
        await self.send(calls.shutdown())


class RolloutClient:
    """The blocking twin of `AsyncRolloutClient`, for scripts and synchronous trainers.

    Same arguments, methods and errors; each call blocks until its answer.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            auth=FoundToken(self.base_url, token, token_file),
            transport=transport,
        )

    def __enter__(self) -> "RolloutClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one described call and parse its answer (see `AsyncRolloutClient.send`)."""
        for attempt in range(2):
            try:
                return _finish(call, self._http.request(**_request(call, self._timeout_s)))
            except httpx.TransportError as exc:
                if not (attempt == 0 and _stale_connection(call, exc)):
                    raise ServerUnavailable(f"{self.base_url}: {exc!r}") from exc
        raise AssertionError("unreachable")

    def submit(self, jobs: Iterable[JobLike]) -> list[SubmittedJob]:
        """Submit jobs (in batches); one `SubmittedJob` per job, in order. Resubmitting a
        `job_id` with the same request is safe; `Conflict` for a different request."""
        out: list[SubmittedJob] = []
        for batch in _batches(as_requests(jobs)):
            out += self.send(calls.submit(batch)).jobs
        return out

    def job(self, job_id: str) -> JobView:
        """The job's current state and timings; `NotFound` for an unknown id."""
        return self.send(calls.job(job_id))

    def result(self, job_id: str, wait: float = 0.0) -> Trajectory | None:
        """The finished trajectory, or None if still running after `wait` seconds;
        `NotFound` for an unknown id."""
        return self.send(calls.result(job_id, wait))

    def wait_for(self, job_ids: Sequence[str], timeout_s: float) -> dict[str, Trajectory]:
        """Trajectories of the given jobs by job id, polled one after the other;
        `TimeoutError` if any is unfinished after `timeout_s`."""
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
        """One page of the durable results feed after cursor `after` (at most `limit`),
        long-polling up to `wait` seconds for the first; `next_cursor` continues it."""
        return self.send(calls.results(after, limit, wait))

    def iter_results(
        self, after: int = 0, *, wait: float = 30.0, limit: int = 100
    ) -> Iterator[Trajectory]:
        """Follow the durable results cursor forever (break out when you have enough); each
        trajectory's `cursor` is what to pass as `after` to resume exactly there."""
        cursor = after
        while True:
            page = self.results(cursor, limit, wait)
            yield from page.results
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> list[str]:
        """Cancel one job; the ids actually cancelled (empty if it had finished).
        `NotFound` for an unknown id."""
        return self.send(calls.cancel(job_id)).cancelled

    def cancel_where(
        self,
        *,
        group_id: str | None = None,
        job_ids: Sequence[str] | None = None,
        all: bool = False,
    ) -> list[str]:
        """Cancel the unfinished jobs of a group, of a list of ids, or `all`; the ids
        cancelled (unknown and finished ids are skipped)."""
        return self.send(calls.cancel_where(_cancel_filter(group_id, job_ids, all))).cancelled

    def add_backend(self, spec: BackendSpec | Mapping[str, Any]) -> BackendView:
        """Register an inference server; its view. `Conflict` if the id is taken by a
        different spec, `InvalidRequest` if the server cannot use it."""
        return self.send(calls.add_backend(BackendSpec.model_validate(spec)))

    def backends(self) -> list[BackendView]:
        """Every registered inference server with its state and load."""
        return self.send(calls.list_backends())

    def remove_backend(self, backend_id: str) -> None:
        """Unregister an inference server; `NotFound` for an unknown id."""
        self.send(calls.remove_backend(backend_id))

    def status(self) -> StatusResponse:
        """The server's health, stage capacities, job counts and results cursor."""
        return self.send(calls.status())

    def pause(
        self, mode: PauseMode = "wait", timeout_s: float = 60.0, *, policy: str | None = None
    ) -> PauseResponse:
        """Stop generation on every backend of this server (see `AsyncRolloutClient.pause`
        for the modes and `policy`); an `ApiError` with status 504 if not paused within
        `timeout_s`."""
        return self.send(calls.pause(mode, timeout_s, policy))

    def resume(
        self, policy_version: int, max_policy_lag: int | None = None, *, policy: str | None = None
    ) -> PauseResponse:
        """Resume generation; segments sampled from now on carry `policy_version` (of
        `policy`). `Conflict` if the version goes backwards."""
        return self.send(calls.resume(policy_version, max_policy_lag, policy))

    def resize_pools(self, **sizes: int) -> PoolSizes:
        """Change stage pool sizes (e.g. `run=64`); the sizes now in force."""
        return self.send(calls.resize_pools(PoolsPatch(**sizes)))

    def shutdown(self) -> None:
        """Ask the server to stop accepting jobs and shut down (202: it happens after)."""
        self.send(calls.shutdown())
