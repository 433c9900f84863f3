"""The API's calls described once, as data; the sync and async clients only send them."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter

from agentroll.server.schema import (
    BackendSpec,
    BackendView,
    CancelFilter,
    CancelResponse,
    JobRequest,
    JobView,
    PauseResponse,
    PoolSizes,
    PoolsPatch,
    ResultsPage,
    ResumeRequest,
    StatusResponse,
    SubmitBatch,
    SubmitResponse,
    Trajectory,
)

T = TypeVar("T")
_BACKENDS = TypeAdapter(list[BackendView])


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[int, Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    ok: frozenset[int] = frozenset({200, 201, 202, 204})
    timeout_extra_s: float = 0.0
    """Added to the client timeout, for long-polls."""
    idempotent: bool | None = None
    """Safe to send again after a connection error; None: only GET requests are."""

    @property
    def retryable(self) -> bool:
        return self.method == "GET" if self.idempotent is None else self.idempotent


def _model(cls: type[Any]) -> Callable[[int, Any], Any]:
    return lambda _status, body: cls.model_validate(body)


def submit(jobs: Sequence[JobRequest]) -> Call[SubmitResponse]:
    body = SubmitBatch(jobs=list(jobs)).model_dump(mode="json", exclude_none=True)
    # Resubmitting is idempotent on job_id: safe to repeat when every job names its id.
    named = all(j.job_id is not None for j in jobs)
    return Call("POST", "/v1/jobs", _model(SubmitResponse), json=body, idempotent=named)


def job(job_id: str) -> Call[JobView]:
    return Call("GET", f"/v1/jobs/{job_id}", _model(JobView))


def result(job_id: str, wait: float) -> Call[Trajectory | None]:
    def parse(status: int, body: Any) -> Trajectory | None:
        return None if status == 202 else Trajectory.model_validate(body)

    return Call(
        "GET", f"/v1/jobs/{job_id}/result", parse, params={"wait": wait}, timeout_extra_s=wait
    )


def results(after: int, limit: int, wait: float) -> Call[ResultsPage]:
    params = {"after": after, "limit": limit, "wait": wait}
    return Call("GET", "/v1/results", _model(ResultsPage), params=params, timeout_extra_s=wait)


def cancel(job_id: str) -> Call[CancelResponse]:
    return Call("POST", f"/v1/jobs/{job_id}/cancel", _model(CancelResponse))


def cancel_where(selector: CancelFilter) -> Call[CancelResponse]:
    body = selector.model_dump(mode="json", exclude_none=True)
    return Call("POST", "/v1/jobs/cancel", _model(CancelResponse), json=body)


def add_backend(spec: BackendSpec) -> Call[BackendView]:
    body = spec.model_dump(mode="json", exclude_none=True)
    return Call("POST", "/v1/backends", _model(BackendView), json=body)


def list_backends() -> Call[list[BackendView]]:
    return Call("GET", "/v1/backends", lambda _s, body: _BACKENDS.validate_python(body))


def remove_backend(backend_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/backends/{backend_id}", lambda _s, _b: None)


def pause(mode: str, timeout_s: float, policy: str | None = None) -> Call[PauseResponse]:
    """Weight-sync barrier: stop dispatching generation (`wait` drains in-flight requests);
    `policy`: only that policy's (default: the `default` policy's)."""
    body: dict[str, Any] = {"mode": mode, "timeout_s": timeout_s}
    if policy is not None:
        body["policy"] = policy
    return Call(
        "POST", "/v1/generation/pause", _model(PauseResponse), json=body, timeout_extra_s=timeout_s
    )


def resume(
    policy_version: int, max_policy_lag: int | None, policy: str | None = None
) -> Call[PauseResponse]:
    body = ResumeRequest(
        policy_version=policy_version,
        max_policy_lag=max_policy_lag,
        **({} if policy is None else {"policy": policy}),
    )
    json = body.model_dump(exclude_none=True, exclude_unset=True)  # `policy` only if named
    return Call("POST", "/v1/generation/resume", _model(PauseResponse), json=json)


def status() -> Call[StatusResponse]:
    return Call("GET", "/v1/status", _model(StatusResponse))


def resize_pools(patch: PoolsPatch) -> Call[PoolSizes]:
    body = patch.model_dump(exclude_none=True)
    return Call("PATCH", "/v1/admin/pools", _model(PoolSizes), json=body)


def shutdown() -> Call[None]:
    return Call("POST", "/v1/admin/shutdown", lambda _s, _b: None)
