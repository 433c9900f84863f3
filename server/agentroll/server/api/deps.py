"""Route dependencies: the app's service objects live on `app.state`."""

from typing import Annotated

from fastapi import Depends, Request

from agentroll.server.llm import BackendPool
from agentroll.server.service import JobService


def get_service(request: Request) -> JobService:
    service: JobService = request.app.state.service
    return service


def get_backends(request: Request) -> BackendPool:
    pool: BackendPool = request.app.state.backends
    return pool


Service = Annotated[JobService, Depends(get_service)]
Backends = Annotated[BackendPool, Depends(get_backends)]
