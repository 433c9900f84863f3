"""Job submission, job views and cancellation."""

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from agentroll.server.schema.trajectory import LogprobsMode, Timing, Trajectory

IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Client-chosen ids (job, group, backend, policy): printable, no spaces, at most 128 characters."""
AGENT_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
DEFAULT_POLICY = "default"
"""The policy of single-agent jobs, and of backends registered without one."""
MAX_AGENTS = 16

MAX_BATCH = 10_000
MAX_NESTING = 32


def _depth(value: Any, limit: int, level: int = 1) -> None:
    if level > limit:
        raise ValueError(f"nested deeper than {limit} levels")
    if isinstance(value, dict):
        for item in value.values():
            _depth(item, limit, level + 1)
    elif isinstance(value, list):
        for item in value:
            _depth(item, limit, level + 1)


def _shallow(value: dict[str, Any]) -> dict[str, Any]:
    _depth(value, MAX_NESTING)
    return value


JSONObject = Annotated[dict[str, Any], AfterValidator(_shallow)]
"""A JSON object of bounded nesting (deeply nested input is refused, not recursed into)."""
StopString = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class JobState(StrEnum):
    queued = "queued"
    init = "init"
    ready = "ready"
    run = "run"
    eval = "eval"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    timed_out = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.completed, JobState.failed, JobState.cancelled, JobState.timed_out})


class SamplingParams(BaseModel):
    """Per-turn sampling; always sent explicitly so the backend's defaults never leak in."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)
    max_tokens: int = Field(1024, ge=1, le=1_000_000, description="Per generation call.")
    min_tokens: int | None = Field(
        None,
        ge=1,
        exclude_if=lambda n: n is None,  # unset: the same request, fingerprint included
        description="Per generation call: end-of-sequence and stop tokens are not sampled "
        "before this many tokens. A turn a pause splits owes only the rest; a call whose "
        "room in the budget is smaller owes what fits.",
    )
    seed: int | None = None
    stop: list[StopString] = Field(default_factory=list, max_length=16)
    stop_token_ids: list[int] = Field(default_factory=list, max_length=64)
    logprobs_mode: LogprobsMode | None = Field(
        None,
        exclude_if=lambda mode: mode is None,  # unset: the same request, fingerprint included
        description="The logprobs the trajectory must carry: only backends started in this "
        "mode serve the job, and one that is not fails the call (`infra_error`). Unset: "
        "whatever the backend gives, declared in the trajectory's `logprobs`.",
    )

    @model_validator(mode="after")
    def _min_within_max(self) -> "SamplingParams":
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) is larger than max_tokens ({self.max_tokens})"
            )
        return self


class AgentLimits(BaseModel):
    """Bounds on one rollout. Every stage has a timeout; the job has an overall deadline."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, ge=1, le=10_000)
    max_response_tokens: int = Field(32_768, ge=1, description="All turns together.")
    max_context_tokens: int | None = Field(
        None, ge=1, description="Prompt + response budget; defaults to the backend's max_model_len."
    )
    init_timeout_s: float = Field(300.0, gt=0)
    run_timeout_s: float = Field(1800.0, gt=0)
    eval_timeout_s: float = Field(600.0, gt=0)
    deadline_s: float = Field(7200.0, gt=0, description="From submission, queues included.")


class AgentSpec(BaseModel):
    """One named agent of a multi-agent job: which policy samples for it, whether to train it."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(
        DEFAULT_POLICY,
        pattern=IDENTIFIER,
        description="Its generations go only to backends registered with this `policy`.",
    )
    trainable: bool = Field(
        True, description="False: a frozen agent; its trace is returned but not trained on."
    )
    policy_version: int | None = Field(
        None, ge=0, description="That policy's version at submission (default: the server's)."
    )


AgentName = Annotated[str, StringConstraints(pattern=AGENT_NAME)]


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str | None = Field(
        None, pattern=IDENTIFIER, description="Client-chosen id; resubmission is idempotent."
    )
    handler: str = Field(
        ...,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("handler", "task"),  # `task` is the same field
        description="The task (handler) to run; may be spelled `task`.",
    )
    instance: JSONObject = Field(..., description="The task instance, handler-specific.")
    agent: JSONObject | None = Field(
        None,
        exclude_if=lambda agent: agent is None,  # unset: the same request, fingerprint included
        description='The agent that runs the task, `{"type": name, ...settings}` (tool_loop, '
        "answer, a harness preset, an installed agent); absent: the task's default agent.",
    )
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    limits: AgentLimits = Field(default_factory=AgentLimits)
    group_id: str | None = Field(None, pattern=IDENTIFIER)
    backend_tags: list[Annotated[str, StringConstraints(max_length=128)]] = Field(
        default_factory=list, max_length=16
    )
    policy_version: int | None = Field(
        None, ge=0, description="Trainer's policy version at submission (default: the server's)."
    )
    metadata: JSONObject = Field(default_factory=dict, description="Echoed in the result.")
    agents: dict[AgentName, AgentSpec] | None = Field(
        None,
        exclude_if=lambda agents: agents is None,  # a single-agent request dumps as before
        min_length=1,
        max_length=MAX_AGENTS,
        description="Named agents (`ctx.agents[name]`), each with its own policy and trace; "
        "absent for a single-agent job.",
    )


class SubmitBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobRequest] = Field(..., min_length=1, max_length=MAX_BATCH)


class SubmittedJob(BaseModel):
    job_id: str
    state: JobState
    created: bool = Field(description="False when the id already existed (idempotent resubmit).")


class SubmitResponse(BaseModel):
    jobs: list[SubmittedJob]


class JobView(BaseModel):
    job_id: str
    handler: str
    group_id: str | None
    state: JobState
    submitted_at: float
    finished_at: float | None = None
    attempts: int = Field(
        0,
        description="Attempts of this job that started (entered INIT), restarts included; 0 "
        "while it waits in the queue. A requeue after a restart is spent only by such an attempt.",
    )
    timing: Timing = Field(default_factory=Timing)
    result: Trajectory | None = None


class CancelFilter(BaseModel):
    """Cancel by filter; at least one criterion is required, and `all` stands alone."""

    model_config = ConfigDict(extra="forbid")

    group_id: str | None = Field(None, pattern=IDENTIFIER)
    job_ids: list[str] | None = Field(None, max_length=MAX_BATCH)
    all: bool = False

    @model_validator(mode="after")
    def _one_criterion(self) -> "CancelFilter":
        given = [self.group_id is not None, self.job_ids is not None]
        if self.all and any(given):
            raise ValueError("`all` cannot be combined with other criteria")
        if not self.all and not any(given):
            raise ValueError("give group_id, job_ids, or all=true")
        return self


class CancelResponse(BaseModel):
    cancelled: list[str] = Field(description="Jobs that were live and are now cancelled.")
