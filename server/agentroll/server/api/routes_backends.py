"""LLM backends: register, drain, remove."""

from fastapi import APIRouter, Response

from agentroll.server.api.deps import AdminOnly, Backends, Registrations
from agentroll.server.errors import UnknownBackend
from agentroll.server.schema import BackendSpec, BackendView

router = APIRouter(prefix="/v1", tags=["backends"])
admin_router = APIRouter(prefix="/v1", tags=["backends"], dependencies=[AdminOnly])


@router.get("/backends", response_model=list[BackendView])
async def list_backends(backends: Backends) -> list[BackendView]:
    return backends.views()


@admin_router.post("/backends", response_model=BackendView, status_code=201)
async def add_backend(
    spec: BackendSpec, registrations: Registrations, response: Response
) -> BackendView:
    """Register a vLLM-protocol server; idempotent for an identical spec with the same id.

    Registrations are persisted: a restarted server knows its backends again."""
    backend, created = await registrations.add(spec)
    if not created:
        response.status_code = 200
    return backend.view()


@admin_router.post("/backends/{backend_id}/drain", response_model=BackendView, status_code=202)
async def drain_backend(backend_id: str, registrations: Registrations) -> BackendView:
    """Stop routing new requests to it; it is removed once its in-flight calls finish."""
    backend = registrations.drain(backend_id)
    if backend is None:
        raise UnknownBackend(backend_id)
    return backend.view()


@admin_router.delete("/backends/{backend_id}", status_code=204)
async def remove_backend(backend_id: str, registrations: Registrations) -> Response:
    if not await registrations.remove(backend_id):
        raise UnknownBackend(backend_id)
    return Response(status_code=204)
