"""`TaskView`: the rollout's context as an evaluator handler expects to see it.

A harness job wraps another task family's instance (`{"evaluator": "swe", "task": {...}}`).
The evaluator's own `init`/`eval` read `ctx.instance`; the view shows them the inner task
and passes everything else (sandboxes, state, LLM, proxy) straight through, but for the
address-space limit a harness may set on the sandbox its CLI runs in.
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentroll.handlers.context import (
    AgentSession,
    JudgeReply,
    LimitsView,
    LLMProxy,
    LLMSession,
    ProxyLimits,
    RolloutContext,
)
from agentroll.server.schema.messages import ChatMessage

if TYPE_CHECKING:
    from agentroll.runtime import Sandbox, SandboxSpec


class TaskView:
    def __init__(
        self,
        ctx: RolloutContext,
        instance: Mapping[str, Any],
        *,
        address_space_bytes: int | None = None,
    ) -> None:
        self._ctx = ctx
        self._instance = instance
        self._address_space = address_space_bytes

    @property
    def job_id(self) -> str:
        return self._ctx.job_id

    @property
    def instance(self) -> Mapping[str, Any]:
        return self._instance

    @property
    def limits(self) -> LimitsView:
        return self._ctx.limits

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self._ctx.metadata

    @property
    def llm(self) -> LLMSession:
        return self._ctx.llm

    @property
    def agents(self) -> Mapping[str, AgentSession]:
        return self._ctx.agents

    @property
    def state(self) -> dict[str, Any]:
        return self._ctx.state

    @property
    def sandbox(self) -> "Sandbox | None":
        return self._ctx.sandbox

    async def open_sandbox(self, spec: "SandboxSpec | None" = None) -> "Sandbox":
        """The evaluator's sandbox, with the harness's address space where it sets one."""
        if spec is not None and self._address_space is not None:
            limits = spec.limits.model_copy(update={"max_memory_bytes": self._address_space})
            spec = spec.model_copy(update={"limits": limits})
        return await self._ctx.open_sandbox(spec)

    async def open_llm_proxy(
        self,
        sandbox: "Sandbox | None" = None,
        *,
        limits: ProxyLimits | None = None,
        parser: str = "hermes",
    ) -> LLMProxy:
        return await self._ctx.open_llm_proxy(sandbox, limits=limits, parser=parser)

    async def ask_judge(
        self,
        messages: Sequence[ChatMessage],
        *,
        tag: str,
        policy: str | None = None,
        max_tokens: int,
        timeout_s: float,
    ) -> JudgeReply:
        return await self._ctx.ask_judge(
            messages, tag=tag, policy=policy, max_tokens=max_tokens, timeout_s=timeout_s
        )

    def time_left(self) -> float:
        return self._ctx.time_left()

    def agent_time(self) -> float:
        return self._ctx.agent_time()

    def set_finish_reason(self, reason: str) -> None:
        self._ctx.set_finish_reason(reason)

    def record_tool_call(self, tool: str, seconds: float) -> None:
        self._ctx.record_tool_call(tool, seconds)

    def record_tool_startup(self, tool: str, seconds: float) -> None:
        self._ctx.record_tool_startup(tool, seconds)
