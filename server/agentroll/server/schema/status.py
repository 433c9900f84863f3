"""Server status, pool sizing and result pages."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentroll.server.schema.backends import BackendView
from agentroll.server.schema.jobs import DEFAULT_POLICY, IDENTIFIER
from agentroll.server.schema.trajectory import Trajectory


class StageStatus(BaseModel):
    capacity: int = Field(description="Configured workers.")
    busy: int = Field(description="Workers holding a job now.")
    queued: int = Field(description="Jobs waiting for a worker.")


class PoolSizes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init: int = Field(32, ge=1, le=100_000, description="INIT workers (sandboxes starting).")
    run: int = Field(256, ge=1, le=100_000, description="RUN workers (agent loops).")
    eval: int = Field(32, ge=1, le=100_000, description="EVAL workers (graders).")
    ready_buffer: int = Field(
        64, ge=1, le=100_000, description="Sandboxes initialising or initialised, awaiting RUN."
    )


class PoolsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init: int | None = Field(None, ge=1, le=100_000)
    run: int | None = Field(None, ge=1, le=100_000)
    eval: int | None = Field(None, ge=1, le=100_000)
    ready_buffer: int | None = Field(None, ge=1, le=100_000)


PauseMode = Literal["wait", "abort", "keep"]
"""How a pause treats generations in flight: `wait` lets them finish, `abort` stops them (their
partial tokens come back with finish_reason `abort`), `keep` parks them until resume."""


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: PauseMode = Field(
        "wait",
        description="wait: let in-flight generations finish; abort: stop them (partial tokens are "
        "kept, the turn continues after resume); keep: park them in the backends (vLLM keep).",
    )
    timeout_s: float = Field(60.0, gt=0, le=3600, description="For wait and abort: until quiet.")
    policy: str = Field(
        DEFAULT_POLICY,
        pattern=IDENTIFIER,
        description="Whose generation to pause: that policy's backends and the agents sampling "
        "from it; the other policies keep generating.",
    )


class PauseResponse(BaseModel):
    policy: str = DEFAULT_POLICY
    paused: bool
    mode: str | None
    policy_version: int
    in_flight: int = Field(description="Generations still in flight (parked, in keep mode).")
    waited_s: float
    backend_errors: dict[str, str] = Field(
        default_factory=dict, description="Backends whose own pause/resume call failed."
    )


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy_version: int = Field(..., ge=0, description="The policy version now being served.")
    max_policy_lag: int | None = Field(
        None, ge=0, description="If set: jobs older than current - lag are not started."
    )
    policy: str = Field(
        DEFAULT_POLICY, pattern=IDENTIFIER, description="The policy whose weights were updated."
    )


class PolicyStatus(BaseModel):
    """One policy's generation: its weight-sync state and its load, to spot a bottleneck."""

    paused: bool
    mode: str | None = None
    policy_version: int
    max_policy_lag: int | None = None
    backends: list[str] = Field(description="Ids of the backends registered for it.")
    in_flight: int = Field(description="Generation calls on its backends now.")
    queued: int = Field(description="Generation calls held back by its pause.")
    generations: int = Field(description="Generation calls answered so far.")
    prompt_tokens: int = Field(description="Prompt tokens sent to its backends so far.")
    completion_tokens: int = Field(description="Tokens its backends sampled so far.")


class AdmissionStatus(BaseModel):
    waiting: dict[str, int] = Field(
        default_factory=dict,
        description="Jobs held back from INIT now, by reason: `memory`, `pids`, `cpu`.",
    )
    cpu_pressure: float = Field(
        0.0, description="% of the time between the last two readings tasks waited for a CPU."
    )
    live: int = Field(0, description="Jobs admitted to INIT and not yet finished.")
    live_limit: int = Field(
        0, description="Live jobs the node has room for: measured, it adapts to CPU pressure."
    )
    memory_available_bytes: int = 0
    threads: int = Field(0, description="Threads on the node now.")


class StatusResponse(BaseModel):
    accepting: bool
    paused: bool = False
    policy_version: int = 0
    max_policy_lag: int | None = None
    stages: dict[str, StageStatus]
    ready: int = Field(description="Jobs initialised and waiting for a RUN worker.")
    jobs_by_state: dict[str, int]
    backends: list[BackendView]
    results_cursor: int = Field(description="Cursor of the newest finished result.")
    admission: AdmissionStatus = Field(
        default_factory=AdmissionStatus, description="Why jobs wait before INIT, and the node."
    )
    policies: dict[str, PolicyStatus] = Field(
        default_factory=dict,
        description="Per policy; `paused` and `policy_version` above are the default policy's.",
    )


class ResultsPage(BaseModel):
    results: list[Trajectory]
    next_cursor: int = Field(description="Pass as `after` to continue; durable across restarts.")
