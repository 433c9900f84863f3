"""`ToolAgentHandler`: a task, run by default under the tool-calling agent loop.

A task family subclasses it and fills in four things: the system prompt, the task prompt,
the sandbox (spec and preparation) and `grade`. Its default agent (`default_agent`: the
`tool_loop`, configured by `instance["agent"]`, see `AgentConfig`) comes with it, and a job
may run it under any other agent (`agentroll.handlers.agents`). A task scored on one final
answer says how it reads it (`final_answer`, see `agentroll.handlers.agent.final_answer`):
it then runs without a sandbox under the `answer` agent by default.

    class Haiku(ToolAgentHandler):
        name = "haiku"
        system_prompt = "You write poems to files."
        default_tools = ("bash", "str_replace_editor", "submit")

        def task_prompt(self, ctx):
            return f"Write a haiku about {ctx.instance['topic']} to poem.txt"

        async def grade(self, ctx, result):
            poem = await ctx.sandbox.exec(["cat", "poem.txt"], timeout=10)
            return Reward(float(len(poem.stdout.splitlines()) == 3))
"""

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

from agentroll.handlers.agent.answer import AnswerAgent
from agentroll.handlers.agent.config import AgentConfig
from agentroll.handlers.agent.final_answer import FinalAnswer
from agentroll.handlers.agent.loop import AgentRun
from agentroll.handlers.agent.tool_loop import ToolLoopAgent
from agentroll.handlers.agent.tools import SubmitTool
from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.base import AgentHandler
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.mcp import ToolSource
from agentroll.runtime import Limits, SandboxSpec
from agentroll.server.schema.messages import ChatMessage

MiB = 1 << 20
# Modest by default: an agent's shell needs little, and many sandboxes share a node. The
# workspace is a size-limited tmpfs where the runtime can make one (bwrap): a policy that
# writes until the disk is full fills its own workspace, never the node's disk. Its pages
# and /tmp's count against the sandbox's total memory.
DEFAULT_LIMITS = Limits(
    max_processes=128,
    max_memory_bytes=2048 * MiB,
    max_total_memory_bytes=3072 * MiB,
    max_file_size_bytes=64 * MiB,
    tmp_bytes=128 * MiB,
    workspace_bytes=1024 * MiB,
)


class ToolAgentHandler(AgentHandler):
    system_prompt: ClassVar[str] = "You are a helpful assistant that solves tasks with tools."
    default_tools: ClassVar[tuple[str, ...]] = ("bash", "python", "str_replace_editor", "submit")
    default_config: ClassVar[AgentConfig] = AgentConfig()
    final_answer: ClassVar[FinalAnswer | None] = None
    """Set for a task scored on one final answer: how it is asked for and read. `grade` then
    reads only that answer, so an agent that needs no sandbox (`answer`) runs without one."""
    serves_mcp_tools: ClassVar[bool] = False
    """True: the task's own tools reach a harness over MCP (`mcp_tools`)."""

    # -- what a task family provides -----------------------------------------------------------
    def task_prompt(self, ctx: RolloutContext) -> str:
        raise NotImplementedError

    def submit_tool(self, ctx: RolloutContext) -> SubmitTool:
        """The `submit` tool (with an `answer` for a `final_answer` task); override to ask for
        other arguments."""
        return SubmitTool() if self.final_answer is None else self.final_answer.submit_tool()

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        return SandboxSpec(limits=DEFAULT_LIMITS, label=ctx.job_id)

    async def prepare(self, ctx: RolloutContext) -> None:
        """Put the task into the freshly started sandbox (files, a repository, ...)."""

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        """Score what the agent left (its `result`, the sandbox); a meaningful reward, maybe 0.
        A task written before agents were separate overrides `eval(ctx)` instead."""
        raise NotImplementedError(f"{type(self).__name__} implements neither grade nor eval")

    def first_messages(self, ctx: RolloutContext, config: AgentConfig) -> list[ChatMessage]:
        """The tool loop's prompt."""
        return [
            {"role": "system", "content": config.system_prompt or self.system_prompt},
            {"role": "user", "content": self.task_prompt(ctx)},
        ]

    def plain_messages(self, ctx: RolloutContext) -> list[ChatMessage]:
        """The prompt of an agent without tools (`answer`)."""
        answer = self.final_answer
        system = self.system_prompt if answer is None else answer.plain_system_prompt
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self.task_prompt(ctx)},
        ]

    def mcp_tools(self, ctx: RolloutContext) -> AbstractAsyncContextManager[ToolSource]:
        """Where `serves_mcp_tools`: the task's tools, open for the harness's run and closed
        when it leaves the `async with` (on every path); raising on leaving ends RUN so."""
        raise NotImplementedError(f"{type(self).__name__} serves no MCP tools")

    # -- its default agent -----------------------------------------------------------------------
    def default_agent(self, ctx: RolloutContext) -> Agent:
        """The agent a job that names none runs (a new one per call: agents keep their
        rollout's records in `ctx.state`): the tool loop, or for a `final_answer` task whose
        instance carries no `"agent"` object, the `answer` agent."""
        if self.final_answer is not None and ctx.instance.get("agent") is None:
            return AnswerAgent()
        return ToolLoopAgent()

    def agent_config(self, ctx: RolloutContext) -> AgentConfig:
        """The tool loop's settings for this rollout: the task's defaults and the instance's."""
        overrides = ctx.instance.get("agent")
        return self.default_config.merged(overrides if isinstance(overrides, dict) else None)

    def validate_instance(self, instance: dict[str, Any]) -> None:
        super().validate_instance(instance)
        overrides = instance.get("agent")
        if overrides is None:
            return
        if not isinstance(overrides, dict):
            raise ValueError(f"invalid {self.name} instance: 'agent' must be an object")
        try:
            ToolLoopAgent.from_config("tool_loop", overrides).check(self)
        except (ValueError, LookupError) as exc:
            raise ValueError(f"invalid {self.name} instance: agent: {exc}") from exc

    # -- the stages, under any agent -------------------------------------------------------------
    async def set_up(self, ctx: RolloutContext, agent: Agent) -> None:
        """INIT for `agent`: start the sandbox and prepare the task in it, while the tools
        with a start-up cost start (not at their first call)."""
        if not agent.uses_sandbox and self.final_answer is not None:
            return
        sandbox = await ctx.open_sandbox(agent.sandbox_spec(self.sandbox_spec(ctx)))
        started, _ = await asyncio.gather(
            sandbox.tools.warm(agent.warm_tools(ctx, self)), self.prepare(ctx)
        )
        for tool, seconds in started.items():
            ctx.record_tool_startup(tool, seconds)

    async def init(self, ctx: RolloutContext) -> None:
        await self.set_up(ctx, self.default_agent(ctx))

    async def run(self, ctx: RolloutContext) -> None:
        await self.default_agent(ctx).run(ctx, self)

    async def eval(self, ctx: RolloutContext) -> Reward:
        return await self.grade(ctx, self.default_agent(ctx).result(ctx))

    def agent_run(self, ctx: RolloutContext) -> AgentRun:
        """The tool loop's record (an empty one if it never ran)."""
        return ToolLoopAgent.record(ctx)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        return self.default_agent(ctx).final_result(ctx, self)
