"""What a rollout's sandboxes and tools cost, recorded as it happens.

The context writes here as the handler works; the rollout's trajectory reads it once, so its
`timing` and `metadata["tool_calls"]` say exactly what was recorded, with no counter kept
anywhere else.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentroll.server.metrics import ServerMetrics
from agentroll.server.schema import Timing


@dataclass(eq=False)
class RolloutUsage:
    metrics: ServerMetrics | None = None
    sandbox_start_s: float = 0.0
    tool_s: float = 0.0
    tool_startup_s: float = 0.0
    tool_calls: Counter[str] = field(default_factory=Counter)

    def sandbox_started(self, seconds: float, *, started: bool) -> None:
        """A sandbox start took `seconds` (the server-wide histogram counts only those that
        started: a failed start is the runtime's, not a start time)."""
        self.sandbox_start_s += seconds
        if started and self.metrics is not None:
            self.metrics.sandbox_start_seconds.observe(seconds)

    def tool_call(self, tool: str, seconds: float) -> None:
        self.tool_calls[tool] += 1
        self.tool_s += seconds
        if self.metrics is not None:
            self.metrics.tool_call_seconds.labels(tool).observe(seconds)

    def tool_startup(self, tool: str, seconds: float) -> None:
        self.tool_startup_s += seconds
        if self.metrics is not None:
            self.metrics.tool_startup_seconds.labels(tool).observe(seconds)

    def fill(self, timing: Timing, metadata: dict[str, Any]) -> None:
        """Write what was recorded into a trajectory's timing and metadata."""
        timing.sandbox_start_s = self.sandbox_start_s
        timing.tool_s, timing.tool_calls = self.tool_s, sum(self.tool_calls.values())
        timing.tool_startup_s = self.tool_startup_s
        if self.tool_calls:
            metadata["tool_calls"] = dict(self.tool_calls)
