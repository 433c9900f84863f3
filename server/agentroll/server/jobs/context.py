"""The server's `RolloutContext`: what one job's handler sees, and the sandboxes it owns."""

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentroll.handlers import InfraError, JudgeReply, LLMUnavailable, ProxyLimits
from agentroll.handlers.toolcalls import DEFAULT_PARSER, get_parser
from agentroll.runtime import Runtime, Sandbox, SandboxError, SandboxSpec
from agentroll.runtime.sandbox_inside import SOCKET_DIR_INSIDE
from agentroll.server.jobs.agents import JobAgents
from agentroll.server.jobs.usage import RolloutUsage
from agentroll.server.llm import TokenSession
from agentroll.server.llm.judge import JudgeCaller
from agentroll.server.proxy import ProxyCaps, RolloutProxy, open_proxy
from agentroll.server.proxy.recording import chain_traces
from agentroll.server.recorded import RecordedTokens
from agentroll.server.schema import AgentLimits, ChainTrace
from agentroll.server.schema.messages import ChatMessage

log = logging.getLogger("agentroll.server.sandboxes")

SANDBOX_START_TIMEOUT_S = 120.0
SANDBOX_STOP_GRACE_S = 2.0


@dataclass(eq=False)
class JobContext:
    job_id: str
    instance: Mapping[str, Any]
    limits: AgentLimits
    metadata: Mapping[str, Any]
    llm: TokenSession
    deadline: float
    """`time.monotonic()` value of the job's overall deadline."""
    agent_clock: Callable[[], float]
    """The seconds of the deadline the agent's doing has used so far (`LiveJob.agent_seconds`)."""
    agents: JobAgents = field(default_factory=JobAgents)
    """A multi-agent job's declared agents, each with its own session (empty otherwise)."""
    runtime: Runtime | None = None
    state: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    sandboxes: list[Sandbox] = field(default_factory=list)
    usage: RolloutUsage = field(default_factory=RolloutUsage)
    """What its sandboxes and tools cost (the trajectory's timing reads it)."""
    teardowns: set["asyncio.Task[None]"] = field(default_factory=set)
    llm_proxies: list[RolloutProxy] = field(default_factory=list)
    """Recording LLM proxies opened for harnesses (see `open_llm_proxy`)."""
    """Where background teardowns are tracked (shared with the service, which awaits them)."""
    proxy_caps: ProxyCaps = field(default_factory=ProxyCaps)
    """What each LLM proxy accepts from its harness (the server's `llm_proxy` settings)."""
    judges: JudgeCaller | None = None
    """Where `ask_judge` goes (None: this context reaches no judge backend)."""

    @property
    def sandbox(self) -> Sandbox | None:
        return self.sandboxes[0] if self.sandboxes else None

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def agent_time(self) -> float:
        return self.agent_clock()

    async def ask_judge(
        self,
        messages: Sequence[ChatMessage],
        *,
        tag: str,
        policy: str | None = None,
        max_tokens: int,
        timeout_s: float,
    ) -> JudgeReply:
        if self.judges is None:
            raise LLMUnavailable("this rollout reaches no judge backend", cause="no_backend")
        return await self.judges.ask(
            messages, tag=tag, policy=policy, max_tokens=max_tokens, timeout_s=timeout_s
        )

    def set_finish_reason(self, reason: str) -> None:
        self.finish_reason = reason

    def record_tool_call(self, tool: str, seconds: float) -> None:
        self.usage.tool_call(tool, seconds)

    def record_tool_startup(self, tool: str, seconds: float) -> None:
        self.usage.tool_startup(tool, seconds)

    async def open_sandbox(self, spec: SandboxSpec | None = None) -> Sandbox:
        if self.runtime is None:
            raise InfraError("this server has no sandbox runtime", cause="no_sandbox_runtime")
        began, started = time.monotonic(), False
        timeout = max(1.0, min(SANDBOX_START_TIMEOUT_S, self.time_left()))
        try:
            sandbox = await self.runtime.start(spec or SandboxSpec(), timeout=timeout)
            started = True
        except SandboxError as exc:
            raise InfraError(f"sandbox did not start: {exc}", cause="sandbox_start_failed") from exc
        finally:
            self.usage.sandbox_started(time.monotonic() - began, started=started)
        self.sandboxes.append(sandbox)
        return sandbox

    async def open_llm_proxy(
        self,
        sandbox: Sandbox | None = None,
        *,
        limits: ProxyLimits | None = None,
        parser: str = DEFAULT_PARSER,
    ) -> RolloutProxy:
        target = sandbox or self.sandbox
        if target is None:
            raise InfraError("the LLM proxy needs a sandbox: open one first", cause="no_sandbox")
        # bwrap and Apptainer bind the socket directory at a fixed path; `local` shares the host's.
        local = self.runtime is not None and self.runtime.name == "local"
        proxy = await open_proxy(
            self.llm,
            target.socket_dir,
            inside_dir=str(target.socket_dir) if local else SOCKET_DIR_INSIDE,
            name=f"llm-{len(self.llm_proxies)}.sock",
            limits=limits or ProxyLimits(),
            parser=get_parser(parser),
            max_sampled_tokens=self.limits.max_response_tokens,
            context_tokens=self.limits.max_context_tokens,
            label=self.job_id,
            caps=self.proxy_caps,
        )
        self.llm_proxies.append(proxy)
        return proxy

    def recorded_llm(self) -> RecordedTokens:
        """Where the trajectory's token fields come from: a harness's main chain when an LLM
        proxy recorded calls, else the handler's own session."""
        for proxy in self.llm_proxies:
            view = proxy.trajectory()
            if view is not None:
                return view
        return self.llm

    def recorded_chains(self, sampling: dict[str, Any]) -> list[ChainTrace] | None:
        """`Trajectory.chains`: the other chains of the proxy whose main chain the token
        fields hold (None where it rebuilt only one)."""
        for proxy in self.llm_proxies:
            if proxy.trajectory() is not None:
                return chain_traces(proxy, sampling) or None
        return None

    def proxy_metadata(self) -> dict[str, Any]:
        """`metadata["llm_proxy"]`: chains, counts and break reasons (empty without a proxy)."""
        if not self.llm_proxies:
            return {}
        reports = [p.report() for p in self.llm_proxies]
        return {"llm_proxy": reports[0] if len(reports) == 1 else reports}

    async def stop_agent_processes(self, timeout_s: float) -> None:
        """Kill every process the agent left in this rollout's sandboxes (its harness and the
        LLM proxy's traffic included): what grades the rollout then runs with none of them."""
        for proxy in [p for p in self.llm_proxies if p.listening]:
            await proxy.close()
        for sandbox in self.sandboxes:
            await sandbox.stop_agent(timeout=timeout_s)

    def release_sandboxes(self) -> "asyncio.Task[None] | None":
        """Tear down every sandbox of this rollout in the background; returns the task."""
        for proxy in [p for p in self.llm_proxies if p.listening]:  # recordings stay
            task = asyncio.create_task(proxy.close(), name=f"proxy-close:{self.job_id}")
            self.teardowns.add(task)
            task.add_done_callback(self.teardowns.discard)
        if not self.sandboxes:
            return None
        doomed, self.sandboxes = self.sandboxes, []
        task = asyncio.create_task(_stop_all(self.job_id, doomed), name=f"teardown:{self.job_id}")
        self.teardowns.add(task)
        task.add_done_callback(self.teardowns.discard)
        return task


async def _stop_all(job_id: str, sandboxes: list[Sandbox]) -> None:
    for sandbox in sandboxes:
        try:
            await sandbox.stop(grace_s=SANDBOX_STOP_GRACE_S)
        except Exception:  # a failed teardown must not hide the others; the reaper retries
            log.exception("job %s: sandbox %s did not stop cleanly", job_id, sandbox.id)
