"""Route dependencies: the app's service objects live on `app.state`; admin rights are
marked on each request by the guard middleware."""

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from agentroll.server.api.middleware import ADMIN_STATE_KEY
from agentroll.server.jobs import JobService
from agentroll.server.llm import BackendPool


def get_service(request: Request) -> JobService:
    service: JobService = request.app.state.service
    return service


def get_backends(request: Request) -> BackendPool:
    pool: BackendPool = request.app.state.backends
    return pool


def require_admin(request: Request) -> None:
    """403 unless the request carries admin rights (absent mark: refused, never assumed)."""
    if request.scope.get("state", {}).get(ADMIN_STATE_KEY) is not True:
        raise HTTPException(403, "this route needs the admin token (admin_token)")


Service = Annotated[JobService, Depends(get_service)]
Backends = Annotated[BackendPool, Depends(get_backends)]
AdminOnly = Depends(require_admin)
"""On a router or route: only callers with admin rights get through."""
