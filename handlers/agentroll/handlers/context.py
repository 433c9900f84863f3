"""What a handler sees of its rollout: the `RolloutContext` protocol and its parts.

Defined here, implemented by the server, so that handlers never import the server.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from agentroll.server.schema.messages import ChatMessage, ToolSpec

if TYPE_CHECKING:
    from agentroll.handlers.mcp import McpAnswer
    from agentroll.runtime import Sandbox, SandboxSpec

Message = dict[str, Any]
"""A message as an untyped dict: the spelling kept for plugins written against it. New code
uses `ChatMessage`."""


@dataclass(frozen=True, slots=True)
class SampledTurn:
    """One generation call as the backend answered it: the assistant turn the policy sampled."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    backend_id: str
    policy_version: int


Turn = SampledTurn
"""The name `SampledTurn` had first; kept for plugins that import it."""


@dataclass(slots=True)
class Reward:
    value: float
    """The episode's reward."""
    info: dict[str, Any] = field(default_factory=dict)
    agents: dict[str, float] = field(default_factory=dict)
    """Multi-agent jobs: a reward of its own per agent name (optional; agents left out are
    trained on the episode's `value`)."""
    components: dict[str, float] = field(default_factory=dict)
    """Named parts of the reward (e.g. `{"correct": 1.0, "format": 0.5}`), passed on to the
    trainer beside `value` as `reward_components`; `value` stays the reward trained on."""


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """A judge model's answer to one `ask_judge` call (never part of the trajectory)."""

    text: str
    finish_reason: str
    backend_id: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    """From the call to the answer, retries and pauses included."""


class LimitsView(Protocol):
    @property
    def max_turns(self) -> int: ...
    @property
    def max_response_tokens(self) -> int: ...
    @property
    def run_timeout_s(self) -> float: ...
    @property
    def eval_timeout_s(self) -> float: ...
    @property
    def deadline_s(self) -> float: ...


@runtime_checkable
class LLMSession(Protocol):
    """A token-recording conversation with the policy.

    Model output is recorded as the exact ids the backend sampled (mask 1); everything in
    between (tool observations, chat-template glue) is tokenized as a delta and appended
    with mask 0. Earlier turns are never re-rendered.
    """

    @property
    def messages(self) -> Sequence[ChatMessage]: ...
    @property
    def num_turns(self) -> int: ...
    @property
    def response_tokens(self) -> int: ...

    async def start(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> None:
        """Tokenize the first prompt (system + task) through the backend."""
        ...

    async def generate(self, *, max_tokens: int | None = None) -> SampledTurn:
        """Sample the next assistant turn from prompt + everything recorded so far.

        Raises `ContextLengthExceeded` when nothing more fits, `LLMUnavailable` when no
        backend could serve the call.
        """
        ...

    async def add_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append observations (tool results, user follow-ups) and the next generation prompt."""
        ...

    def describe_last_reply(self, message: ChatMessage) -> None:
        """Replace the readable view of the last assistant turn (e.g. with parsed `tool_calls`).

        Only `messages` changes; the recorded tokens never do.
        """
        ...


@runtime_checkable
class AgentSession(Protocol):
    """One declared agent of a multi-agent job: its own token-recording session, sampling only
    from the backends of its policy, recorded as its own trace."""

    @property
    def name(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def trainable(self) -> bool: ...
    @property
    def llm(self) -> LLMSession: ...


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """Per-rollout caps the LLM proxy enforces on a harness (None: no cap of that kind)."""

    max_calls: int | None = None
    """Chat/completion calls; the next one is refused and the proxy stops with `max_calls`."""
    max_sampled_tokens: int | None = None
    """Tokens sampled over all calls; None: the job's `limits.max_response_tokens`."""
    time_limit_s: float | None = None
    """Seconds from `open_llm_proxy`; after that every call is refused (`time_limit`)."""


@dataclass(frozen=True, slots=True)
class ProxyStop:
    """Why the proxy stopped serving: a cap the harness hit, or the proxy's own failure."""

    kind: Literal["limit", "infra"]
    cause: str
    message: str


@runtime_checkable
class LLMProxy(Protocol):
    """A per-rollout, OpenAI-compatible endpoint that records every call as tokens.

    It listens on a Unix socket in the sandbox's socket directory (`socket_path` is where the
    sandbox sees it); a bridge inside the sandbox exposes it on loopback TCP to the harness.
    Every request must carry `api_key` (`Authorization: Bearer ...`); others get 401.
    """

    @property
    def api_key(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def socket_path(self) -> str: ...
    @property
    def stopped(self) -> ProxyStop | None:
        """Set once a cap was hit or the proxy failed; later calls are refused."""
        ...

    @property
    def last_reply(self) -> str | None:
        """The text the model sampled in the last call of the chain that becomes the
        trajectory (None before any), e.g. an answer."""
        ...

    @property
    def num_calls(self) -> int:
        """Calls the proxy has served so far (refused ones not counted)."""
        ...

    async def wait_stopped(self) -> ProxyStop:
        """Until the proxy stops (use it to end a harness that keeps going)."""
        ...

    def report(self) -> dict[str, Any]:
        """Counts so far: calls, chains, tokens (what the trajectory's metadata will carry)."""
        ...

    async def close(self, mcp_wait_s: float = 0.0) -> None:
        """Stop listening (idempotent). What was recorded stays for the trajectory; a `/mcp`
        call still being answered is waited for up to `mcp_wait_s` (none on a cancellation),
        then cancelled."""
        ...

    def serve_mcp(self, answer: "McpAnswer") -> None:
        """Serve `POST /mcp` (same key) with `answer`: a task's tools, for the harness over
        MCP (`agentroll.handlers.mcp`). Without it, `/mcp` is 404."""
        ...


class RolloutContext(Protocol):
    """Everything one rollout's handler may use; `state` carries data across stages."""

    @property
    def job_id(self) -> str: ...
    @property
    def instance(self) -> Mapping[str, Any]: ...
    @property
    def limits(self) -> LimitsView: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def llm(self) -> LLMSession: ...
    @property
    def agents(self) -> Mapping[str, AgentSession]:
        """The job's declared agents by name (empty for a single-agent job). Asking for an
        undeclared one raises `InfraError` (cause `undeclared_agent`)."""
        ...

    @property
    def state(self) -> dict[str, Any]: ...
    @property
    def sandbox(self) -> "Sandbox | None":
        """The rollout's first sandbox, once `open_sandbox` has started it."""
        ...

    async def open_sandbox(self, spec: "SandboxSpec | None" = None) -> "Sandbox":
        """Start a sandbox owned by this rollout (default spec: host root, network off).

        The server tears it down when the rollout ends, however it ends (or after RUN when
        the handler's `eval_sandbox` is "fresh"). Raises `InfraError` if it cannot start.
        """
        ...

    async def open_llm_proxy(
        self,
        sandbox: "Sandbox | None" = None,
        *,
        limits: ProxyLimits | None = None,
        parser: str = "hermes",
    ) -> LLMProxy:
        """Serve a recording OpenAI-compatible endpoint into `sandbox` (default: `ctx.sandbox`).

        The rollout's trajectory is then rebuilt from the calls it records (its main chain in
        the token fields, every chain's counts in `metadata["llm_proxy"]`). `parser` turns
        replies into OpenAI `tool_calls` when a request offers tools. Raises `InfraError` if
        it cannot listen. Closed by the server when the rollout ends.
        """
        ...

    async def ask_judge(
        self,
        messages: Sequence[ChatMessage],
        *,
        tag: str,
        policy: str | None = None,
        max_tokens: int,
        timeout_s: float,
    ) -> JudgeReply:
        """One greedy chat call to a backend registered with `tag` (a judge or reward model).

        Unrecorded: it never enters the trajectory, the policy's token budget or its timing;
        its latency and tokens go to the server's metrics. `policy`: the policy those backends
        serve (default: the one policy of the backends carrying `tag`). Raises `LLMUnavailable`
        when no such backend answers within `timeout_s`.
        """
        ...

    def time_left(self) -> float:
        """Seconds until the job's overall deadline."""
        ...

    def agent_time(self) -> float:
        """Seconds of the deadline the agent's doing has used so far: the work of RUN (its
        turns, tool calls and generations, waits for a paused or slow backend included) and of
        EVAL (grading what it left). The rest went to the server: queues, admission, INIT.
        A grader that fits its limit into the deadline shortens it by this time only."""
        ...

    def set_finish_reason(self, reason: str) -> None:
        """Why the agent loop ended (`stop`, `length`, `max_turns`, ...), for the trajectory."""
        ...

    def record_tool_call(self, tool: str, seconds: float) -> None:
        """Count one tool call and its duration in the trajectory's timing."""
        ...

    def record_tool_startup(self, tool: str, seconds: float) -> None:
        """Count a tool's start-up (a Python kernel, say) apart from its calls' latency."""
        ...
