"""The trajectory contract `agentroll.trajectory.v1`: what a trainer consumes.

Versioned: fields are added, never repurposed. The token fields obey the invariants of
docs/design.md (invariants 1-4); the length invariant (2), "infrastructure failure is never
reward 0" and its converse, "a scored outcome carries a reward" (`ok` and `agent_error` always
have a finite one), are checked here, so a malformed trajectory cannot even be constructed on
either side of the wire. A multi-agent job's trajectory adds `agents`, one `AgentTrace` per
agent, each held to the same invariants; a single-agent one never carries the key. A
harness run whose recording proxy rebuilt several token chains adds `chains`, one `ChainTrace`
per chain beside the main one (which fills the top-level token fields); a one-chain run never
carries the key.
"""

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, Field, GetPydanticSchema, StringConstraints, model_validator

from agentroll.server.schema.messages import ChatMessage, ToolSpec

TRAJECTORY_SCHEMA = "agentroll.trajectory.v1"
MAX_REWARD_COMPONENTS = 32
RewardComponentName = Annotated[str, StringConstraints(min_length=1, max_length=64)]

_AS_PLAIN_DICTS = GetPydanticSchema(
    lambda _source, handler: handler.generate_schema(list[dict[str, Any]])
)
"""Validated and written as a list of plain JSON objects, key for key: the typed view is
mypy's, not pydantic's. A `TypedDict` schema would reorder keys, refuse roles it does not
list and add about a tenth to building each trajectory; a message's other keys
(`reasoning_content`, a provider's fields) pass through unchanged (docs/trajectory.md,
"Messages and tools")."""
Messages = Annotated[list[ChatMessage], _AS_PLAIN_DICTS]
"""A trajectory's `messages`: the readable conversation in the OpenAI chat shape."""
Tools = Annotated[list[ToolSpec], _AS_PLAIN_DICTS]
"""A trajectory's `tools`: the tool specs the policy was offered, as it was shown them."""

LogprobsMode = Literal["raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits"]
"""What a backend's logprobs are (vLLM's `--logprobs-mode`, a server setting): `raw_*` come
from the model's logits before any processing, `processed_*` after temperature, top-k and
top-p (the distribution the token was actually sampled from); `*_logits` are unnormalised."""


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
    logprobs_mode: LogprobsMode | None = Field(
        None, description="What this turn's logprobs are, as its backend declared or told."
    )


class LogprobsInfo(BaseModel):
    """What `response_logprobs` are: the backend's mode and the sampling that produced them.

    `mode` null: the backend did not say (not declared at registration and not discoverable)
    or the turns came from backends in different modes (each segment then says its own)."""

    mode: LogprobsMode | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1


ROUTED_EXPERT_DTYPES = {"uint8": 1, "uint16": 2}


class RoutedExperts(BaseModel):
    """The MoE experts the engine routed each input position to (for router replay).

    `data` is base64 of a little-endian `dtype` array of shape `(positions, num_layers,
    top_k)`, row-major: row `i` is the routing of token `i` of `prompt_ids + response_ids`
    when the engine read it. `positions` counts the tokens the engine read, at most that
    length minus one: the last sampled token was never read back, nor were tokens appended
    after the last generation call (a final tool observation). Routing for a token never
    read cannot change the logprob of any sampled token before it."""

    num_layers: int = Field(ge=1)
    top_k: int = Field(ge=1)
    positions: int = Field(ge=0)
    dtype: Literal["uint8", "uint16"]
    data: str

    @model_validator(mode="after")
    def _size(self) -> "RoutedExperts":
        size = self.positions * self.num_layers * self.top_k * ROUTED_EXPERT_DTYPES[self.dtype]
        # base64 length of `size` bytes, padded
        if len(self.data) != 4 * ((size + 2) // 3):
            raise ValueError(f"routed_experts data is not {size} bytes of {self.dtype}")
        return self


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


class _Declared(Protocol):
    prompt_ids: list[int]
    response_ids: list[int]
    segments: list[Segment]
    logprobs: LogprobsInfo | None
    routed_experts: RoutedExperts | None


def check_logprobs_mode(segments: Sequence[Segment], logprobs: LogprobsInfo | None) -> None:
    """The declared logprobs mode is every segment's."""
    declared = logprobs.mode if logprobs is not None else None
    if declared is not None and any(s.logprobs_mode != declared for s in segments):
        raise ValueError(f"a segment's logprobs are not the declared {declared}")


def check_declarations(tokens: _Declared) -> None:
    """The declared logprobs mode is every segment's; routing covers no token never read."""
    check_logprobs_mode(tokens.segments, tokens.logprobs)
    total = len(tokens.prompt_ids) + len(tokens.response_ids)
    routed = tokens.routed_experts
    if routed is not None and routed.positions > total - 1:
        raise ValueError(f"routed_experts covers {routed.positions} positions of {total}")


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
    logprobs: LogprobsInfo | None = Field(
        None, description="What `response_logprobs` are; null where nothing was sampled."
    )
    routed_experts: RoutedExperts | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="MoE routing of every token this agent's engine read (as the trajectory's).",
    )
    num_turns: int = 0
    reward: float | None = Field(
        None, description="This agent's own reward, if the handler gives one (else the episode's)."
    )
    messages: Messages = Field(default_factory=list)
    tools: Tools = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _invariants(self) -> "AgentTrace":
        check_token_fields(
            self.response_ids, self.response_mask, self.response_logprobs, self.segments
        )
        check_declarations(self)
        return self


ChainKind = Literal["main", "continuation", "side", "parallel"]
"""How a harness's token chain relates to its agent loop (docs/harnesses.md, Chains):
`main` fills the trajectory's token fields; `continuation` is the loop across a break that
rewrote its history (context compaction, truncation); `side` a call beside the loop that
the loop came back from (a title, a router call); `parallel` one made while another was
being sampled."""


class ChainTrace(BaseModel):
    """One token chain of a harness run other than the main one: a trainable sample of its
    own, with the trajectory's token fields, meanings and invariants."""

    index: int = Field(ge=0, description="Its position in `metadata.llm_proxy.chains`.")
    kind: ChainKind
    calls: list[int] = Field(
        default_factory=list, description="The proxy calls it holds (`llm_proxy.call_log`)."
    )
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    policy_versions: list[int] = Field(default_factory=list)
    logprobs: LogprobsInfo | None = None
    num_turns: int = 0

    @model_validator(mode="after")
    def _invariants(self) -> "ChainTrace":
        check_token_fields(
            self.response_ids, self.response_mask, self.response_logprobs, self.segments
        )
        check_logprobs_mode(self.segments, self.logprobs)
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
    logprobs: LogprobsInfo | None = Field(
        None, description="What `response_logprobs` are; null where nothing was sampled."
    )
    routed_experts: RoutedExperts | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="MoE routing of every token, where the backend returned it for every turn.",
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
    messages: Messages = Field(default_factory=list)
    tools: Tools = Field(default_factory=list)
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
    chains: list[ChainTrace] | None = Field(
        None,
        exclude_if=lambda chains: chains is None,  # one-chain JSON exactly as before
        description="Harness runs with several token chains: every chain beside the main "
        "one (which fills the token fields above), each a sample of its own.",
    )

    @model_validator(mode="after")
    def _invariants(self) -> "Trajectory":
        check_token_fields(
            self.response_ids, self.response_mask, self.response_logprobs, self.segments
        )
        check_declarations(self)
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
