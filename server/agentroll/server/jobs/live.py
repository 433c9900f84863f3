"""A job while it lives in the server's memory (from admission to its persisted result)."""

import asyncio
import time
from dataclasses import dataclass, field

from agentroll.server.schema import JobRequest, JobState, StageTiming, Timing


@dataclass(eq=False)
class LiveJob:
    job_id: str
    request: JobRequest
    submitted_at: float
    """Wall-clock time of the (first) submission."""
    attempts: int = 0
    """Attempts that started (entered INIT), this server's and its predecessors'."""
    state: JobState = JobState.queued
    started: float = field(default_factory=time.monotonic)
    """Monotonic time this server admitted the job; the deadline counts from here."""
    timing: Timing = field(default_factory=Timing)
    task: "asyncio.Task[None] | None" = None
    cancel_cause: str | None = None
    """Set before the job's task is cancelled: `cancelled_by_client`, `server_shutdown`."""
    finishing: bool = False
    """The result is being persisted; too late to cancel."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    working_since: float | None = None
    """Monotonic time the current stage's work began (None while the job waits)."""

    def stage_timing(self, stage: str) -> StageTiming:
        current = getattr(self.timing, stage)
        if current is None:
            current = StageTiming()
            setattr(self.timing, stage, current)
        assert isinstance(current, StageTiming)
        return current

    def agent_seconds(self) -> float:
        """The work of RUN and EVAL so far: the part of the deadline the agent's doing used
        (its turns, and the grading of what it left). Queues, admission and INIT are the
        server's."""
        done = sum(t.work_s for t in (self.timing.run, self.timing.eval) if t is not None)
        if self.state in (JobState.run, JobState.eval) and self.working_since is not None:
            done += time.monotonic() - self.working_since
        return done
