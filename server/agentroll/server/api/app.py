"""`create_app(settings)`: the FastAPI application, its state built in the lifespan."""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from agentroll.handlers import HandlerRegistry
from agentroll.handlers.builtin.grading_pool import shutdown_default_pool
from agentroll.handlers.builtin.verifiers_env import shutdown_default_workers
from agentroll.runtime import Runtime, RuntimeUnavailable
from agentroll.server import recovery
from agentroll.server.api import (
    routes_admin,
    routes_backends,
    routes_generation,
    routes_jobs,
    routes_results,
)
from agentroll.server.api.errors import install_error_handlers
from agentroll.server.api.middleware import OPEN_PATHS, GuardMiddleware
from agentroll.server.auth import api_tokens
from agentroll.server.jobs import JobService
from agentroll.server.live_metrics import live_gauges
from agentroll.server.llm import BackendPool, HTTPClient
from agentroll.server.metrics import ServerMetrics
from agentroll.server.settings import Settings
from agentroll.server.state import ServerState
from agentroll.server.status import server_status
from agentroll.server.store import JobStore
from agentroll.server.ui import Viewer
from agentroll.server.ui import router as ui_router

log = logging.getLogger("agentroll.server")


async def _start_runtime(settings: Settings, metrics: ServerMetrics) -> Runtime | None:
    """The sandbox runtime, after reaping what servers that died left behind (ours only).

    A machine without the runtime's tools still serves sandbox-free tasks; rollouts that ask
    for a sandbox then fail as `infra_error` (`no_sandbox_runtime`), never silently.
    """
    try:
        runtime = settings.sandbox.build()
    except RuntimeUnavailable as exc:
        log.error("no sandbox runtime (%s): rollouts that need a sandbox will fail", exc)
        return None
    reaped = await runtime.reap_orphans()
    metrics.sandboxes_reaped.inc(reaped)
    if reaped:
        log.warning("reaped %d sandboxes left by servers that are gone", reaped)
    return runtime


def create_app(settings: Settings, *, registry: HandlerRegistry | None = None) -> FastAPI:
    """Build the app; its services are created in the lifespan, on `app.state`."""
    registry = registry or HandlerRegistry()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = ServerMetrics()
        store = JobStore(
            settings.db_path,
            synchronous=settings.db_synchronous,
            on_commit=metrics.store_write_seconds.observe,
        )
        await store.open()
        http = HTTPClient(timeout_s=settings.llm_request_timeout_s)
        backends = BackendPool(http)
        runtime = await _start_runtime(settings, metrics)
        state = ServerState.build(settings, store, registry, backends, runtime, metrics)
        service = JobService(state)
        metrics.watch(lambda: live_gauges(state, service))
        app.state.metrics = metrics
        app.state.begin_shutdown = service.begin_shutdown
        health = asyncio.create_task(
            backends.probe_forever(
                settings.health_interval_s, lambda b: state.policies.get(b.policy).gate.paused
            ),
            name="backend-health",
        )
        app.state.server = state
        app.state.service = service
        app.state.viewer = Viewer.over(settings.db_path, lambda: server_status(state, service))
        await recovery.recover(state, service)
        log.info("agentroll server ready (store %s)", settings.db_path)
        try:
            yield
        finally:
            health.cancel()
            await service.shutdown(settings.shutdown_grace_s)
            await shutdown_default_pool()  # the math grader's worker processes
            await shutdown_default_workers()  # the verifiers environments' workers
            if runtime is not None:
                await runtime.close()
            await http.close()
            await app.state.viewer.reader.close()
            await store.close()

    app = FastAPI(
        title="agentroll",
        version="1",
        summary="Rollout-as-a-service for RL of multi-turn LLM agents",
        lifespan=lifespan,
    )
    app.state.request_exit = lambda: None  # replaced by whoever serves the app
    tokens = api_tokens(settings)  # generated and kept on disk when none is configured
    app.state.api_token = tokens.api  # for in-process callers (the demo, tests)
    app.add_middleware(
        GuardMiddleware,
        max_body_bytes=settings.max_body_bytes,
        api_token=tokens.api,
        admin_token=tokens.admin,
        open_paths=OPEN_PATHS | {"/metrics"} if settings.metrics_public else OPEN_PATHS,
        max_requests_per_client=settings.max_requests_per_client,
    )
    install_error_handlers(app)
    for router in (
        routes_jobs.router,
        routes_results.router,
        routes_backends.router,
        routes_backends.admin_router,
        routes_generation.router,
        routes_admin.router,
        routes_admin.admin_router,
        ui_router,
    ):
        app.include_router(router)
    return app
