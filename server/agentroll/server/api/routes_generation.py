"""The weight-sync barrier: pause and resume generation across every backend."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agentroll.server import weight_sync
from agentroll.server.api.deps import Service
from agentroll.server.api.errors import ApiError, error_response
from agentroll.server.schema import PauseRequest, PauseResponse, ResumeRequest

router = APIRouter(prefix="/v1/generation", tags=["generation"])


@router.post("/pause", response_model=PauseResponse)
async def pause(body: PauseRequest, service: Service) -> PauseResponse | JSONResponse:
    """Stop dispatching generation everywhere; see `mode`. The pause holds until resume."""
    try:
        return await weight_sync.pause(service, body.mode, body.timeout_s)
    except weight_sync.PauseTimeout as exc:
        detail = exc.response.model_dump()
        return error_response(504, "pause_timeout", str(exc), detail)


@router.post("/resume", response_model=PauseResponse)
async def resume(body: ResumeRequest, service: Service) -> PauseResponse:
    """Reopen generation with the new `policy_version` (stamped on every later segment)."""
    try:
        return await weight_sync.resume(service, body.policy_version, body.max_policy_lag)
    except weight_sync.VersionConflict as exc:
        raise ApiError(409, "conflict", str(exc)) from exc
