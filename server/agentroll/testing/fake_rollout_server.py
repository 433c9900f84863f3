"""An in-memory agentroll server behind an httpx transport, on a virtual clock.

For trainer-client tests that must not depend on wall-clock speed: each job's outcome, reward
and duration come from `simulate(request)`, and the results feed hands out finished jobs in
order of *virtual* finishing time (a job submitted at virtual time t finishes at t + its
duration; each results poll advances the clock to the next finish). So "failures are slower"
is exact, however loaded the machine is.

    server = FakeRolloutServer(simulate)
    client = AsyncRolloutClient(server.url, transport=server.transport)

Routes: `GET /v1/status`, `POST /v1/jobs` (idempotent on job id, 409 on a different request),
`GET /v1/results`, `POST /v1/jobs/cancel`, `POST /v1/generation/pause|resume`. `intercept`, if
set, sees every request first and may answer it instead (a fault: 429, non-JSON, a stall).
"""

import asyncio
import heapq
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentroll.server.schema import JobRequest, Outcome, Trajectory
from agentroll.server.schema.trajectory import ErrorInfo, Timing

PAGE = 8


@dataclass(frozen=True)
class SimulatedRun:
    """What one job does: its outcome, reward (None for outcomes without one) and duration."""

    outcome: Outcome
    reward: float | None
    seconds: float


Simulate = Callable[[JobRequest], SimulatedRun]
Intercept = Callable[[httpx.Request], Awaitable[httpx.Response | None]]
_STATUS = {Outcome.ok: "completed", Outcome.agent_error: "completed",
           Outcome.timed_out: "timed_out", Outcome.cancelled: "cancelled"}  # fmt: skip


@dataclass
class FakeRolloutServer:
    simulate: Simulate
    url: str = "http://fake-rollout-0"
    capacity: int = 64
    intercept: Intercept | None = None
    clock: float = 0.0
    policy_version: int = 0
    requests: dict[str, str] = field(default_factory=dict)
    """Job id -> its request as JSON (what idempotency compares)."""
    submitted: list[str] = field(default_factory=list)
    """Every job id created here, in order."""
    cancelled: list[str] = field(default_factory=list)
    """Every job id cancelled here while it was live."""
    _live: list[tuple[float, int, str]] = field(default_factory=list)
    _runs: dict[str, tuple[JobRequest, SimulatedRun]] = field(default_factory=dict)
    _feed: list[dict[str, Any]] = field(default_factory=list)
    _done: set[str] = field(default_factory=set)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if self.intercept is not None:
            answer = await self.intercept(request)
            if answer is not None:
                return answer
        route = (request.method, request.url.path)
        body: dict[str, Any] = json.loads(request.content) if request.content else {}
        if route == ("GET", "/v1/status"):
            return httpx.Response(200, json=self._status())
        if route == ("POST", "/v1/jobs"):
            return self._submit(body["jobs"])
        if route == ("GET", "/v1/results"):
            return await self._results(request.url.params)
        if route == ("POST", "/v1/jobs/cancel"):
            return httpx.Response(200, json={"cancelled": self._cancel(body.get("job_ids", []))})
        if route[1] in ("/v1/generation/pause", "/v1/generation/resume"):
            self.policy_version = body.get("policy_version", self.policy_version)
            paused = route[1].endswith("pause")
            view = {"paused": paused, "mode": None, "policy_version": self.policy_version,
                    "in_flight": 0, "waited_s": 0.0}  # fmt: skip
            return httpx.Response(200, json=view)
        return httpx.Response(404, json={"error": {"type": "not_found", "message": str(route)}})

    def _status(self) -> dict[str, Any]:
        return {
            "accepting": True,
            "policy_version": self.policy_version,
            "stages": {"run": {"capacity": self.capacity, "busy": 0, "queued": 0}},
            "ready": 0,
            "jobs_by_state": {"running": len(self._live)},
            "backends": [],
            "results_cursor": len(self._feed),
        }

    def _submit(self, jobs: list[dict[str, Any]]) -> httpx.Response:
        parsed = [JobRequest.model_validate(j) for j in jobs]
        clash = [
            r.job_id
            for r in parsed
            if r.job_id in self.requests and self.requests[r.job_id] != _identity(r)
        ]
        if clash:
            error = {"type": "conflict", "message": "job id reused", "detail": clash}
            return httpx.Response(409, json={"error": error})
        answers = []
        for request in parsed:
            job_id = request.job_id
            assert job_id is not None, "the fake needs client-chosen job ids"
            created = job_id not in self.requests
            if created:
                self.requests[job_id] = _identity(request)
                self.submitted.append(job_id)
                run = self.simulate(request)
                self._runs[job_id] = (request, run)
                heapq.heappush(self._live, (self.clock + run.seconds, len(self.submitted), job_id))
            state = "completed" if job_id in self._done else "run"
            answers.append({"job_id": job_id, "created": created, "state": state})
        return httpx.Response(200, json={"jobs": answers})

    async def _results(self, params: httpx.QueryParams) -> httpx.Response:
        after, limit = int(params.get("after", 0)), int(params.get("limit", 100))
        if len(self._feed) <= after and self._live:
            for _ in range(min(PAGE, limit)):
                if not self._live:
                    break
                finish, _, job_id = heapq.heappop(self._live)
                self.clock = max(self.clock, finish)
                self._record(job_id, None)
        elif len(self._feed) <= after:
            await asyncio.sleep(min(float(params.get("wait", 0.0)), 0.02))  # an idle long-poll
        page = self._feed[after : after + limit]
        return httpx.Response(200, json={"results": page, "next_cursor": after + len(page)})

    def _cancel(self, job_ids: list[str]) -> list[str]:
        live = {job_id for _, _, job_id in self._live}
        hit = [j for j in job_ids if j in live]
        self._live = [entry for entry in self._live if entry[2] not in hit]
        heapq.heapify(self._live)
        for job_id in hit:
            self.cancelled.append(job_id)
            self._record(job_id, Outcome.cancelled)
        return hit

    def _record(self, job_id: str, forced: Outcome | None) -> None:
        request, run = self._runs[job_id]
        outcome = forced or run.outcome
        usable = outcome in (Outcome.ok, Outcome.agent_error)
        trajectory = Trajectory(
            job_id=job_id,
            group_id=request.group_id,
            handler=request.handler,
            cursor=len(self._feed) + 1,
            outcome=outcome,
            status=_STATUS.get(outcome, "failed"),
            reward=run.reward if usable else None,
            timing=Timing(total_s=run.seconds),
            policy_versions=[self.policy_version] if usable else [],
            error=None if usable else ErrorInfo(type=outcome.value, message="simulated"),
            metadata=request.metadata,
        )
        self._done.add(job_id)
        self._feed.append(trajectory.model_dump(mode="json"))


def _identity(request: JobRequest) -> str:
    return request.model_dump_json(exclude={"job_id", "policy_version"})
