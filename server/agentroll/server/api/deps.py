"""Route dependencies: the server's state and its job service live on `app.state`; admin
rights are marked on each request by the guard middleware. Each route takes the one piece it
needs."""

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from agentroll.server.api.middleware import ADMIN_STATE_KEY
from agentroll.server.backends import PersistedBackends
from agentroll.server.jobs import JobService
from agentroll.server.llm import BackendPool
from agentroll.server.state import ServerState


def get_service(request: Request) -> JobService:
    service: JobService = request.app.state.service
    return service


def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


def get_backends(request: Request) -> BackendPool:
    return get_state(request).backends


def get_registrations(request: Request) -> PersistedBackends:
    return get_state(request).persisted_backends


def require_admin(request: Request) -> None:
    """403 unless the request carries admin rights (absent mark: refused, never assumed)."""
    if request.scope.get("state", {}).get(ADMIN_STATE_KEY) is not True:
        raise HTTPException(403, "this route needs the admin token (admin_token)")


Service = Annotated[JobService, Depends(get_service)]
State = Annotated[ServerState, Depends(get_state)]
Backends = Annotated[BackendPool, Depends(get_backends)]
Registrations = Annotated[PersistedBackends, Depends(get_registrations)]
AdminOnly = Depends(require_admin)
"""On a router or route: only callers with admin rights get through."""
