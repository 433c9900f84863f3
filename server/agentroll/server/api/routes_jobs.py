"""Jobs: submit, inspect, long-poll one result, cancel."""

from fastapi import APIRouter, Query, Request, Response

from agentroll.server.api.deps import Service, require_admin
from agentroll.server.api.disconnect import ClientGone, unless_disconnected
from agentroll.server.errors import UnknownJob
from agentroll.server.schema import (
    CancelFilter,
    CancelResponse,
    JobRequest,
    JobView,
    SubmitBatch,
    SubmitResponse,
    Trajectory,
)

router = APIRouter(prefix="/v1", tags=["jobs"])

WaitSeconds = Query(0.0, ge=0.0, le=600.0, description="Long-poll up to this many seconds.")


@router.post("/jobs", response_model=SubmitResponse)
async def submit_jobs(body: SubmitBatch | JobRequest, service: Service) -> SubmitResponse:
    """Submit one job or `{"jobs": [...]}`; idempotent on client-supplied `job_id`."""
    requests = body.jobs if isinstance(body, SubmitBatch) else [body]
    return SubmitResponse(jobs=await service.submit(requests))


@router.post("/jobs/cancel", response_model=CancelResponse)
async def cancel_jobs(body: CancelFilter, request: Request, service: Service) -> CancelResponse:
    """Cancel live jobs by group, by ids, or all of them (`all`: an admin action, since it
    reaches every submitter's jobs)."""
    if body.all:
        require_admin(request)
    if body.job_ids is not None:
        ids = body.job_ids
    else:
        ids = service.live_ids(None if body.all else body.group_id)
    return CancelResponse(cancelled=await service.cancel(ids))


@router.get("/jobs/{job_id}", response_model=JobView)
async def get_job(job_id: str, service: Service) -> JobView:
    view = await service.view(job_id)
    if view is None:
        raise UnknownJob(job_id)
    return view


@router.get(
    "/jobs/{job_id}/result",
    response_model=Trajectory,
    responses={202: {"model": JobView, "description": "Not finished within `wait`."}},
)
async def get_result(
    job_id: str, request: Request, service: Service, wait: float = WaitSeconds
) -> Response:
    try:
        raw = await unless_disconnected(request, service.wait_result(job_id, wait))
    except ClientGone:
        return Response(status_code=499)
    if raw is None:
        view = await service.view(job_id)
        assert view is not None
        return Response(view.model_dump_json(), status_code=202, media_type="application/json")
    return Response(raw, media_type="application/json")


@router.post("/jobs/{job_id}/cancel", response_model=CancelResponse)
async def cancel_job(job_id: str, service: Service) -> CancelResponse:
    if await service.view(job_id) is None:
        raise UnknownJob(job_id)
    return CancelResponse(cancelled=await service.cancel([job_id]))
