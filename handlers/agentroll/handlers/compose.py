"""`ComposedHandler`: one job's task run under the agent the job names.

The server drives it like any handler (init, run, eval, the error hooks, `final_result`);
INIT is the task's set-up for the agent, RUN the agent's, EVAL the task's `grade` of the
agent's `AgentResult`. Built per job by `HandlerRegistry.for_job`.
"""

from typing import Any

from agentroll.handlers.agent.handler import ToolAgentHandler
from agentroll.handlers.agents import Agent
from agentroll.handlers.base import AgentHandler, ErrorDecision
from agentroll.handlers.context import Reward, RolloutContext


class ComposedHandler(AgentHandler):
    def __init__(self, task: ToolAgentHandler, agent: Agent, *, instance_key: str | None = None):
        self.task = task
        self.agent = agent
        self.instance_key = instance_key
        """Where the task's instance sits in the job's (a `harness` job's `task`); None: it
        is the job's instance."""
        # The task decides how EVAL sees the sandbox and what an instance must hold.
        self.name = task.name  # type: ignore[misc]
        self.eval_sandbox = task.eval_sandbox  # type: ignore[misc]
        self.stop_agent_before_eval = task.stop_agent_before_eval  # type: ignore[misc]
        self.agent_names = task.agent_names  # type: ignore[misc]

    def validate_instance(self, instance: dict[str, Any]) -> None:
        inner = instance if self.instance_key is None else instance[self.instance_key]
        self.task.validate_instance(inner)
        if type(self.task).grade is ToolAgentHandler.grade:
            raise ValueError(
                f"the {self.task.name} task grades only through eval(ctx), so it runs only under "
                "its default agent; implement grade(ctx, result) to run it under another"
            )
        if self.task.serves_mcp_tools and not self.agent.takes_mcp_tools:
            raise ValueError(
                f"the {self.task.name} task's tools reach an agent only over MCP: run it under "
                "its default agent or a harness preset"
            )
        try:
            self.agent.check(self.task)
        except ValueError as exc:
            raise ValueError(f"agent cannot run {self.task.name} tasks: {exc}") from exc

    async def init(self, ctx: RolloutContext) -> None:
        await self.task.set_up(ctx, self.agent)

    async def run(self, ctx: RolloutContext) -> None:
        await self.agent.run(ctx, self.task)

    async def eval(self, ctx: RolloutContext) -> Reward:
        return await self.task.grade(ctx, self.agent.result(ctx))

    def on_init_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return self.task.on_init_error(ctx, exc)

    def on_run_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return self.task.on_run_error(ctx, exc)

    def on_eval_error(self, ctx: RolloutContext, exc: BaseException) -> ErrorDecision:
        return self.task.on_eval_error(ctx, exc)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = self.task.final_result(ctx)
        extra = self.agent.final_result(ctx, self.task)
        if "metadata" in extra:
            out["metadata"] = {**out.get("metadata", {}), **extra["metadata"]}
        return out
