"""Health, readiness, status, pool sizing and shutdown."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentroll.server.api.deps import AdminOnly, Backends, Service, State
from agentroll.server.schema import PoolSizes, PoolsPatch, StatusResponse
from agentroll.server.status import server_status

router = APIRouter(tags=["admin"])
admin_router = APIRouter(tags=["admin"], dependencies=[AdminOnly])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(service: Service, backends: Backends) -> JSONResponse:
    """Readiness: the store is open and jobs are admitted."""
    body = {"ready": service.accepting, "backends": len(backends)}
    return JSONResponse(body, status_code=200 if service.accepting else 503)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus exposition of this server's metrics."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/status", response_model=StatusResponse)
async def status(state: State, service: Service) -> StatusResponse:
    return server_status(state, service)


@admin_router.patch("/v1/admin/pools", response_model=PoolSizes)
async def resize_pools(patch: PoolsPatch, service: Service) -> PoolSizes:
    """Resize stage pools at run time; no job is dropped (shrinking only admits fewer)."""
    return service.resize(patch)


@admin_router.post("/v1/admin/shutdown", status_code=202)
async def shutdown(request: Request, service: Service) -> dict[str, str]:
    """Stop admitting now; the server drains for `shutdown_grace_s`, then stops."""
    service.begin_shutdown()
    request.app.state.request_exit()
    return {"status": "shutting_down"}
