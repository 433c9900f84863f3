"""The server's `RolloutContext`: what one job's handler sees."""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentroll.server.llm import TokenSession
from agentroll.server.schema import AgentLimits


@dataclass(eq=False)
class JobContext:
    job_id: str
    instance: Mapping[str, Any]
    limits: AgentLimits
    metadata: Mapping[str, Any]
    llm: TokenSession
    deadline: float
    """`time.monotonic()` value of the job's overall deadline."""
    state: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def set_finish_reason(self, reason: str) -> None:
        self.finish_reason = reason
