"""The weight-sync barrier: pause and resume generation across every backend."""

from fastapi import APIRouter

from agentroll.server import weight_sync
from agentroll.server.api.deps import Service
from agentroll.server.schema import PauseRequest, PauseResponse, ResumeRequest

router = APIRouter(prefix="/v1/generation", tags=["generation"])


@router.post("/pause", response_model=PauseResponse)
async def pause(body: PauseRequest, service: Service) -> PauseResponse:
    """Stop dispatching generation everywhere; see `mode`. The pause holds until resume
    (504 `pause_timeout`, with the pause state as detail, when `timeout_s` passes first)."""
    return await weight_sync.pause(service, body.mode, body.timeout_s)


@router.post("/resume", response_model=PauseResponse)
async def resume(body: ResumeRequest, service: Service) -> PauseResponse:
    """Reopen generation with the new `policy_version` (stamped on every later segment)."""
    return await weight_sync.resume(service, body.policy_version, body.max_policy_lag)
