"""The server's `RolloutContext`: what one job's handler sees, and the sandboxes it owns."""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentroll.handlers import InfraError
from agentroll.runtime import Runtime, Sandbox, SandboxError, SandboxSpec
from agentroll.server.llm import TokenSession
from agentroll.server.metrics import ServerMetrics
from agentroll.server.schema import AgentLimits

log = logging.getLogger("agentroll.server.sandboxes")

SANDBOX_START_TIMEOUT_S = 120.0
SANDBOX_STOP_GRACE_S = 2.0


@dataclass(eq=False)
class JobContext:
    job_id: str
    instance: Mapping[str, Any]
    limits: AgentLimits
    metadata: Mapping[str, Any]
    llm: TokenSession
    deadline: float
    """`time.monotonic()` value of the job's overall deadline."""
    runtime: Runtime | None = None
    state: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    sandboxes: list[Sandbox] = field(default_factory=list)
    sandbox_start_s: float = 0.0
    tool_s: float = 0.0
    tool_calls: Counter[str] = field(default_factory=Counter)
    teardowns: set["asyncio.Task[None]"] = field(default_factory=set)
    metrics: ServerMetrics | None = None
    """Where background teardowns are tracked (shared with the service, which awaits them)."""

    @property
    def sandbox(self) -> Sandbox | None:
        return self.sandboxes[0] if self.sandboxes else None

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def set_finish_reason(self, reason: str) -> None:
        self.finish_reason = reason

    def record_tool_call(self, tool: str, seconds: float) -> None:
        self.tool_calls[tool] += 1
        self.tool_s += seconds
        if self.metrics is not None:
            self.metrics.tool_call_seconds.labels(tool).observe(seconds)

    async def open_sandbox(self, spec: SandboxSpec | None = None) -> Sandbox:
        if self.runtime is None:
            raise InfraError("this server has no sandbox runtime", cause="no_sandbox_runtime")
        began = time.monotonic()
        timeout = max(1.0, min(SANDBOX_START_TIMEOUT_S, self.time_left()))
        try:
            sandbox = await self.runtime.start(spec or SandboxSpec(), timeout=timeout)
        except SandboxError as exc:
            raise InfraError(f"sandbox did not start: {exc}", cause="sandbox_start_failed") from exc
        finally:
            self.sandbox_start_s += time.monotonic() - began
        if self.metrics is not None:
            self.metrics.sandbox_start_seconds.observe(time.monotonic() - began)
        self.sandboxes.append(sandbox)
        return sandbox

    def release_sandboxes(self) -> "asyncio.Task[None] | None":
        """Tear down every sandbox of this rollout in the background; returns the task."""
        if not self.sandboxes:
            return None
        doomed, self.sandboxes = self.sandboxes, []
        task = asyncio.create_task(_stop_all(self.job_id, doomed), name=f"teardown:{self.job_id}")
        self.teardowns.add(task)
        task.add_done_callback(self.teardowns.discard)
        return task


async def _stop_all(job_id: str, sandboxes: list[Sandbox]) -> None:
    for sandbox in sandboxes:
        try:
            await sandbox.stop(grace_s=SANDBOX_STOP_GRACE_S)
        except Exception:  # a failed teardown must not hide the others; the reaper retries
            log.exception("job %s: sandbox %s did not stop cleanly", job_id, sandbox.id)
