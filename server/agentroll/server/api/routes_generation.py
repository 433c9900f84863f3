"""The weight-sync barrier: pause and resume one policy's generation across its backends.
Admin routes: they set the policy version every later sample is stamped with."""

from fastapi import APIRouter

from agentroll.server import weight_sync
from agentroll.server.api.deps import AdminOnly, Service, State
from agentroll.server.schema import PauseRequest, PauseResponse, ResumeRequest

router = APIRouter(prefix="/v1/generation", tags=["generation"], dependencies=[AdminOnly])


@router.post("/pause", response_model=PauseResponse)
async def pause(body: PauseRequest, state: State) -> PauseResponse:
    """Stop dispatching `policy`'s generation (every backend of a single-agent deployment);
    see `mode`. The pause holds until resume (504 `pause_timeout`, with the pause state as
    detail, when `timeout_s` passes first). Other policies keep generating."""
    return await weight_sync.pause(state, body.mode, body.timeout_s, body.policy)


@router.post("/resume", response_model=PauseResponse)
async def resume(body: ResumeRequest, state: State, service: Service) -> PauseResponse:
    """Reopen `policy`'s generation with its new `policy_version` (stamped on every later
    segment that policy samples)."""
    return await weight_sync.resume(
        state, service.cancel_stale_running, body.policy_version, body.max_policy_lag, body.policy
    )
