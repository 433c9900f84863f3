"""Server status, pool sizing and result pages."""

from pydantic import BaseModel, ConfigDict, Field

from agentroll.server.schema.backends import BackendView
from agentroll.server.schema.trajectory import Trajectory


class StageStatus(BaseModel):
    capacity: int = Field(description="Configured workers.")
    busy: int = Field(description="Workers holding a job now.")
    queued: int = Field(description="Jobs waiting for a worker.")


class PoolSizes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init: int = Field(32, ge=1, le=100_000)
    run: int = Field(256, ge=1, le=100_000)
    eval: int = Field(32, ge=1, le=100_000)
    ready_buffer: int = Field(
        64, ge=1, le=100_000, description="Sandboxes initialising or initialised, awaiting RUN."
    )


class PoolsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init: int | None = Field(None, ge=1, le=100_000)
    run: int | None = Field(None, ge=1, le=100_000)
    eval: int | None = Field(None, ge=1, le=100_000)
    ready_buffer: int | None = Field(None, ge=1, le=100_000)


class StatusResponse(BaseModel):
    accepting: bool
    stages: dict[str, StageStatus]
    ready: int = Field(description="Jobs initialised and waiting for a RUN worker.")
    jobs_by_state: dict[str, int]
    backends: list[BackendView]
    results_cursor: int = Field(description="Cursor of the newest finished result.")


class ResultsPage(BaseModel):
    results: list[Trajectory]
    next_cursor: int = Field(description="Pass as `after` to continue; durable across restarts.")
