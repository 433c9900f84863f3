"""The trajectory contract `agentroll.trajectory.v1`: what a trainer consumes.

Versioned: fields are added, never repurposed. The token fields obey the invariants of
docs/design.md (invariants 1-4); the length invariant (2), "infrastructure failure is never
reward 0" and its converse, "a scored outcome carries a reward" (`ok` and `agent_error` always
have a finite one), are checked here, so a malformed trajectory cannot even be constructed on
either side of the wire. A multi-agent job's trajectory adds `agents`, one `AgentTrace` per
agent, each held to the same invariants; a single-agent one never carries the key.
"""

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator

TRAJECTORY_SCHEMA = "agentroll.trajectory.v1"
MAX_REWARD_COMPONENTS = 32
RewardComponentName = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Outcome(StrEnum):
    ok = "ok"
    """The rollout ran; the reward is meaningful (it may be 0). Train on it."""
    agent_error = "agent_error"
    """The policy broke the protocol (bad tool call, context overflow, turn, call or time
    budget used up).

    The reward is meaningful, and always present: train on it as given."""
    infra_error = "infra_error"
    """Sandbox, LLM backend, reward service or server failed. Drop it and resubmit."""
    cancelled = "cancelled"
    timed_out = "timed_out"


class Segment(BaseModel):
    """One sampled turn: `response_ids[start:end]` came from one generation call."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    backend_id: str
    policy_version: int
    finish_reason: str


class StageTiming(BaseModel):
    queue_s: float = Field(0.0, description="Waiting for a worker of this stage.")
    work_s: float = Field(0.0, description="Holding a worker of this stage.")


class Timing(BaseModel):
    init: StageTiming | None = None
    run: StageTiming | None = None
    eval: StageTiming | None = None
    total_s: float = 0.0
    llm_s: float = Field(0.0, description="Time spent waiting on generation calls.")
    llm_calls: int = 0
    tool_s: float = Field(0.0, description="Time spent in tool calls.")
    tool_startup_s: float = Field(
        0.0, description="Time spent starting tools (a Python kernel, ...) before their calls."
    )
    sandbox_start_s: float = Field(0.0, description="Time spent starting sandboxes.")
    tool_calls: int = 0
    grade_wall_s: float = Field(
        0.0, description="Time graders' commands ran under a CPU-time limit (in EVAL)."
    )
    grade_cpu_s: float | None = Field(
        0.0,
        description="CPU time those commands used; null where nothing counted it (a server "
        "without cgroups, Apptainer): their limits were then wall-clock ones.",
    )


class ErrorInfo(BaseModel):
    type: str = Field(description="Stable cause, e.g. `llm_backend_unavailable`, `server_restart`.")
    message: str
    stage: Literal["queued", "init", "run", "eval"] | None = None


def check_token_fields(
    ids: Sequence[int], mask: Sequence[int], logprobs: Sequence[float], segments: Sequence[Segment]
) -> None:
    """Invariant 2, and segments inside the response; `ValueError` otherwise."""
    n = len(ids)
    if len(mask) != n or len(logprobs) != n:
        raise ValueError(
            "response_ids, response_mask and response_logprobs must have equal lengths "
            f"(got {n}, {len(mask)}, {len(logprobs)})"
        )
    for seg in segments:
        if not seg.start <= seg.end <= n:
            raise ValueError(f"segment [{seg.start}, {seg.end}) outside response of {n}")


class AgentTrace(BaseModel):
    """One agent's own token stream in a multi-agent episode: the single-agent token fields,
    with the same meaning and invariants, for what this agent's policy sampled."""

    name: str
    policy: str
    trainable: bool = Field(description="False: a frozen agent; trainers leave it out.")
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)
    segments: list[Segment] = Field(
        default_factory=list, description="policy_version: that policy's version when sampled."
    )
    policy_versions: list[int] = Field(default_factory=list)
    num_turns: int = 0
    reward: float | None = Field(
        None, description="This agent's own reward, if the handler gives one (else the episode's)."
    )
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _invariants(self) -> "AgentTrace":
        check_token_fields(
            self.response_ids, self.response_mask, self.response_logprobs, self.segments
        )
        return self


class Trajectory(BaseModel):
    schema_version: Literal["agentroll.trajectory.v1"] = "agentroll.trajectory.v1"
    job_id: str
    group_id: str | None = None
    handler: str
    cursor: int = Field(0, description="Position in the results stream (completion order).")

    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    policy_versions: list[int] = Field(
        default_factory=list, description="Distinct versions that sampled this; >1 spans an update."
    )

    reward: float | None = None
    reward_info: dict[str, Any] = Field(default_factory=dict)
    reward_components: dict[RewardComponentName, float] | None = Field(
        None,
        max_length=MAX_REWARD_COMPONENTS,
        exclude_if=lambda components: components is None,  # without them, JSON as before
        description="Named parts of the reward the handler reported beside it (e.g. "
        "`correct`, `format`); absent when it reported none. Never summed into `reward`.",
    )
    outcome: Outcome
    status: str = Field(description="Terminal job state: completed, failed, cancelled, timed_out.")
    finish_reason: str | None = None
    num_turns: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    timing: Timing = Field(default_factory=Timing)
    error: ErrorInfo | None = None
    artifacts: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agents: list[AgentTrace] | None = Field(
        None,
        exclude_if=lambda agents: agents is None,  # single-agent JSON exactly as before
        description="Multi-agent jobs: one trace per declared agent. The token fields above "
        "then hold only what went through `ctx.llm` (usually nothing).",
    )

    @model_validator(mode="after")
    def _invariants(self) -> "Trajectory":
        check_token_fields(
            self.response_ids, self.response_mask, self.response_logprobs, self.segments
        )
        agents = self.agents or []
        if self.outcome is Outcome.infra_error and (
            self.reward is not None
            or self.reward_components is not None
            or any(a.reward is not None for a in agents)
        ):
            raise ValueError("an infra_error trajectory carries no reward")
        for name, value in (self.reward_components or {}).items():
            if not math.isfinite(value):
                raise ValueError(f"reward component {name!r} is not finite (got {value})")
        if self.outcome in (Outcome.ok, Outcome.agent_error) and (
            self.reward is None or not math.isfinite(self.reward)
        ):
            raise ValueError(
                f"an {self.outcome.value} trajectory carries a finite reward (got {self.reward})"
            )
        names = [a.name for a in agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agent names must be unique (got {names})")
        return self
