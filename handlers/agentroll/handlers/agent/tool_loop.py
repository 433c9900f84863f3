"""The `tool_loop` agent: agentroll's tool-calling loop on a task (every task's default, but
answer tasks without an `"agent"` object in the instance).

Settings (`{"agent": {"type": "tool_loop", ...}}` in a job, or the instance's own `"agent"`
object) are `AgentConfig` fields laid over the task's defaults.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentroll.handlers.agent.config import AgentConfig
from agentroll.handlers.agent.loop import STATE_KEY, AgentLoop, AgentRun
from agentroll.handlers.agent.tools import build_tools
from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.toolcalls import get_parser

if TYPE_CHECKING:
    from agentroll.handlers.agent.handler import ToolAgentHandler

WARM_TOOLS = ("python",)
"""Tools whose session costs seconds to start (an IPython kernel), started during INIT."""


class ToolLoopAgent(Agent):
    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self.overrides = dict(overrides) if overrides is not None else None

    @classmethod
    def from_config(cls, kind: str, config: Mapping[str, Any]) -> "ToolLoopAgent":
        try:
            get_parser(AgentConfig().merged(dict(config)).parser)
        except LookupError as exc:
            raise ValueError(str(exc)) from exc
        return cls(config)

    def config(self, ctx: RolloutContext, task: "ToolAgentHandler") -> AgentConfig:
        return task.agent_config(ctx).merged(self.overrides)

    def check(self, task: "ToolAgentHandler") -> None:
        task.default_config.merged(self.overrides).tool_names(task.default_tools)

    def warm_tools(self, ctx: RolloutContext, task: "ToolAgentHandler") -> list[str]:
        names = self.config(ctx, task).tool_names(task.default_tools)
        return [t for t in WARM_TOOLS if t in names]

    async def run(self, ctx: RolloutContext, task: "ToolAgentHandler") -> AgentResult:
        config = self.config(ctx, task)
        tools = build_tools(config.tool_names(task.default_tools), task.submit_tool(ctx))
        await AgentLoop(tools, config).run(ctx, task.first_messages(ctx, config))
        return self.result(ctx)

    @staticmethod
    def record(ctx: RolloutContext) -> AgentRun:
        """The loop's record (an empty one if RUN never started)."""
        run = ctx.state.get(STATE_KEY)
        return run if isinstance(run, AgentRun) else AgentRun()

    def result(self, ctx: RolloutContext) -> AgentResult:
        run = self.record(ctx)
        return AgentResult(run.final_text, run.submission, run.ended)

    def final_result(self, ctx: RolloutContext, task: "ToolAgentHandler") -> dict[str, Any]:
        run = self.record(ctx)
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
