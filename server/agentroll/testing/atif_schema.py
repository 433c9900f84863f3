"""Harbor's ATIF trajectory schema as a validator, for tests of `agentroll export --format atif`.

Written from Harbor's own pydantic models, `src/harbor/models/trajectories/` (trajectory.py,
step.py, agent.py, metrics.py, final_metrics.py, observation.py, observation_result.py,
tool_call.py, content.py, subagent_trajectory_ref.py) of the `harbor` 0.26.0 release on PyPI
(wheel `harbor-0.26.0-py3-none-any.whl`, sha256 b7c752c5b51ae2ee1fc2ea30621493c7dc0b5a3d01572
95bed4552115027baee; its git commit is not recorded in the wheel). Harbor needs Python >= 3.12,
so it cannot be imported here.

Every object forbids unknown keys, as upstream's do, and the cross-field rules upstream
checks are checked here too: step ids 1, 2, ... in order; agent-only fields (`model_name`,
`reasoning_effort`, `reasoning_content`, `tool_calls`, `metrics`) only on agent steps; no
metrics on an agent step that made no LLM call; every observation's `source_call_id` names a
tool call of its own step; embedded subagent trajectories carry unique `trajectory_id`s;
timestamps parse as ISO 8601.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ATIF_VERSIONS = Literal[
    "ATIF-v1.0",
    "ATIF-v1.1",
    "ATIF-v1.2",
    "ATIF-v1.3",
    "ATIF-v1.4",
    "ATIF-v1.5",
    "ATIF-v1.6",
    "ATIF-v1.7",
    "ATIF-v1.8",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MediaSource(_Strict):
    media_type: str
    path: str
    duration_sec: float | None = Field(None, ge=0)


class ContentPart(_Strict):
    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: MediaSource | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> "ContentPart":
        if (self.type == "text") != (self.text is not None) or (self.type == "text") == (
            self.source is not None
        ):
            raise ValueError(f"a {self.type} part needs exactly its own field")
        return self


Content = str | list[ContentPart]


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class SubagentTrajectoryRef(_Strict):
    trajectory_id: str | None = None
    trajectory_path: str | None = None
    session_id: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _resolvable(self) -> "SubagentTrajectoryRef":
        if self.trajectory_id is None and self.trajectory_path is None:
            raise ValueError("a subagent reference needs trajectory_id or trajectory_path")
        return self


class ObservationResult(_Strict):
    source_call_id: str | None = None
    content: Content | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Strict):
    results: list[ObservationResult]


class Metrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(None, ge=0)
    extra: dict[str, Any] | None = None


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: Content
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    @model_validator(mode="after")
    def _fields_of_source(self) -> "Step":
        if self.source != "agent":
            present = [name for name in _AGENT_ONLY if getattr(self, name) is not None]
            if present:
                raise ValueError(f"{present} only on agent steps, not {self.source}")
        no_call = self.source == "agent" and self.llm_call_count == 0
        if no_call and (self.metrics is not None or self.reasoning_content is not None):
            raise ValueError("a step with no LLM call carries no metrics or reasoning")
        return self


class Trajectory(_Strict):
    schema_version: ATIF_VERSIONS
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list["Trajectory"] | None = None

    @model_validator(mode="after")
    def _cross_references(self) -> "Trajectory":
        for index, step in enumerate(self.steps):
            if step.step_id != index + 1:
                raise ValueError(f"steps[{index}].step_id is {step.step_id}, not {index + 1}")
            calls = {c.tool_call_id for c in step.tool_calls or []}
            for result in step.observation.results if step.observation else []:
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(
                        f"step {step.step_id}: source_call_id {result.source_call_id!r} "
                        "names no tool call of that step"
                    )
        ids = [sub.trajectory_id for sub in self.subagent_trajectories or []]
        if None in ids or len(set(ids)) != len(ids):
            raise ValueError(f"embedded subagents need unique trajectory_ids (got {ids})")
        return self


def validate_atif(document: dict[str, Any]) -> Trajectory:
    """`document` checked against the schema; `pydantic.ValidationError` where it breaks it."""
    return Trajectory.model_validate(document)
