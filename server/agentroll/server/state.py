"""`ServerState`: what the server holds from start to stop, built once at start-up.

The store, the LLM backends (and their persisted registrations), the policies and their
gates, node admission, the judge caller, the sandbox runtime, the metrics and the set of
background teardowns. Routes, status, live metrics, recovery and weight sync take the piece
they need from here; `JobService` (the life of each job) is built over it and holds only what
is about jobs: the pipeline and the table of live jobs.
"""

import asyncio
from dataclasses import dataclass, field

from agentroll.handlers import HandlerRegistry
from agentroll.runtime import Runtime
from agentroll.server.admission import NodeAdmission
from agentroll.server.backends import PersistedBackends
from agentroll.server.llm import BackendPool
from agentroll.server.llm.judge import JudgeCaller
from agentroll.server.llm.policies import Policies
from agentroll.server.metrics import ServerMetrics
from agentroll.server.settings import Settings
from agentroll.server.store import JobStore


@dataclass(eq=False)
class ServerState:
    settings: Settings
    store: JobStore
    registry: HandlerRegistry
    backends: BackendPool
    persisted_backends: PersistedBackends
    policies: Policies
    admission: NodeAdmission
    judges: JudgeCaller
    runtime: Runtime | None
    metrics: ServerMetrics
    teardowns: set["asyncio.Task[None]"] = field(default_factory=set)
    """Background work (sandbox teardowns, backend drains) that shutdown waits for."""

    @classmethod
    def build(
        cls,
        settings: Settings,
        store: JobStore,
        registry: HandlerRegistry,
        backends: BackendPool,
        runtime: Runtime | None = None,
        metrics: ServerMetrics | None = None,
    ) -> "ServerState":
        metrics = metrics or ServerMetrics()
        teardowns: set[asyncio.Task[None]] = set()
        policies = Policies(settings.max_policy_lag)
        return cls(
            settings=settings,
            store=store,
            registry=registry,
            backends=backends,
            persisted_backends=PersistedBackends(
                backends,
                store,
                drain_timeout_s=settings.llm_request_timeout_s,
                background=teardowns,
            ),
            policies=policies,
            admission=NodeAdmission(settings.admission),
            judges=JudgeCaller(
                backends,
                policies,
                request_timeout_s=settings.llm_request_timeout_s,
                backend_wait_s=settings.backend_wait_s,
                metrics=metrics,
            ),
            runtime=runtime,
            metrics=metrics,
            teardowns=teardowns,
        )
