"""`ToolAgentHandler`: a handler whose RUN stage is the tool-calling agent loop.

A task family subclasses it and fills in four things: the system prompt, the task prompt,
the sandbox (spec and preparation) and `eval`. The loop, the tools and the per-job
configuration (`instance["agent"]`, see `AgentConfig`) come with it:

    class Haiku(ToolAgentHandler):
        name = "haiku"
        system_prompt = "You write poems to files."
        default_tools = ("bash", "str_replace_editor", "submit")

        def task_prompt(self, ctx):
            return f"Write a haiku about {ctx.instance['topic']} to poem.txt"

        async def eval(self, ctx):
            poem = await ctx.sandbox.exec(["cat", "poem.txt"], timeout=10)
            return Reward(float(len(poem.stdout.splitlines()) == 3))
"""

import asyncio
from typing import Any, ClassVar

from agentroll.handlers.agent.config import AgentConfig
from agentroll.handlers.agent.loop import STATE_KEY, AgentLoop, AgentRun
from agentroll.handlers.agent.tools import SubmitTool, Tool, build_tools
from agentroll.handlers.base import AgentHandler
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.toolcalls import get_parser
from agentroll.runtime import Limits, SandboxSpec
from agentroll.server.schema.messages import ChatMessage

MiB = 1 << 20
WARM_TOOLS = ("python",)
"""Tools whose session costs seconds to start (an IPython kernel), started during INIT."""
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

    # -- what a task family provides -----------------------------------------------------------
    def task_prompt(self, ctx: RolloutContext) -> str:
        raise NotImplementedError

    def submit_tool(self, ctx: RolloutContext) -> SubmitTool:
        """The `submit` tool; override to ask for arguments (e.g. an `answer`)."""
        return SubmitTool()

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        return SandboxSpec(limits=DEFAULT_LIMITS, label=ctx.job_id)

    async def prepare(self, ctx: RolloutContext) -> None:
        """Put the task into the freshly started sandbox (files, a repository, ...)."""

    # -- the stages ------------------------------------------------------------------------------
    def agent_config(self, ctx: RolloutContext) -> AgentConfig:
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
            config = self.default_config.merged(overrides)
            config.tool_names(self.default_tools)
            get_parser(config.parser)
        except (ValueError, LookupError) as exc:
            raise ValueError(f"invalid {self.name} instance: agent: {exc}") from exc

    def tools(self, ctx: RolloutContext, config: AgentConfig) -> list[Tool]:
        return build_tools(config.tool_names(self.default_tools), self.submit_tool(ctx))

    def first_messages(self, ctx: RolloutContext, config: AgentConfig) -> list[ChatMessage]:
        return [
            {"role": "system", "content": config.system_prompt or self.system_prompt},
            {"role": "user", "content": self.task_prompt(ctx)},
        ]

    async def init(self, ctx: RolloutContext) -> None:
        sandbox = await ctx.open_sandbox(self.sandbox_spec(ctx))
        names = self.agent_config(ctx).tool_names(self.default_tools)
        warm = [t for t in WARM_TOOLS if t in names]
        # Tools with a start-up cost start while the task is prepared, not at the first call.
        started, _ = await asyncio.gather(sandbox.tools.warm(warm), self.prepare(ctx))
        for tool, seconds in started.items():
            ctx.record_tool_startup(tool, seconds)

    async def run(self, ctx: RolloutContext) -> None:
        config = self.agent_config(ctx)
        loop = AgentLoop(self.tools(ctx, config), config)
        await loop.run(ctx, self.first_messages(ctx, config))

    def agent_run(self, ctx: RolloutContext) -> AgentRun:
        """The loop's record (an empty one if RUN never started)."""
        run = ctx.state.get(STATE_KEY)
        return run if isinstance(run, AgentRun) else AgentRun()

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        run = self.agent_run(ctx)
        if run.turns == 0:
            return {}
        return {
            "metadata": {
                "agent": {
                    "ended": run.ended,
                    "turns": run.turns,
                    "invalid_tool_calls": run.invalid_calls,
                }
            }
        }
