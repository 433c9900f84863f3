"""`Agent`: the policy's side of a rollout, composed per job with a task.

A task (`agentroll.handlers.agent.ToolAgentHandler`) owns its instance model, sandbox,
preparation, prompt, tools and `grade(ctx, AgentResult)`. An agent owns RUN: it drives the
policy on that task and leaves an `AgentResult` to grade. The built-in agents:

- `tool_loop`: agentroll's tool-calling loop (`agentroll.handlers.agent.tool_loop`);
- `answer`: one answer in text, no tools;
- each harness preset (`shell`, `mini_swe_agent`, `claude_code`, ...): a third-party CLI run
  unmodified in the task's sandbox (`agentroll.handlers.harness.agent`).

A job names one as `{"agent": {"type": "<name>", ...settings}}`; without it the task runs
under its default agent. Agents resolve through `agentroll.handlers.registry.AgentRegistry`
(entry-point group `agentroll.agents`), so an installed task runs under any agent.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentroll.handlers.context import RolloutContext

if TYPE_CHECKING:
    from agentroll.handlers.agent.handler import ToolAgentHandler
    from agentroll.runtime import SandboxSpec


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What an agent leaves for grading; the same for every agent, read after RUN ended (or
    failed: then it holds what the agent did until then)."""

    final_text: str = ""
    """The policy's last reply."""
    submission: Mapping[str, Any] | None = None
    """The arguments of a `submit` call, when the agent offers one and the policy made it."""
    ended: str | None = None
    """Why RUN ended, in the agent's words (submit, stop, max_turns, ...); None: unknown."""


class Agent(ABC):
    """One job's agent, built from its settings by `from_config`; shared by nothing else, so
    it may keep its settings on `self` (per-rollout records still go in `ctx.state`)."""

    uses_sandbox: ClassVar[bool] = True
    """False: runs without a sandbox where the task grades without one (answer-only)."""
    takes_mcp_tools: ClassVar[bool] = False
    """True: gives the policy a task's own tools over MCP (`ToolAgentHandler.mcp_tools`);
    a task whose tools reach an agent only so (`serves_mcp_tools`) runs under no other."""

    @classmethod
    @abstractmethod
    def from_config(cls, kind: str, config: Mapping[str, Any]) -> "Agent":
        """The agent registered as `kind` with the job's settings (the `agent` object less
        its `type`); `ValueError` with a readable message if they are wrong."""

    def check(self, task: "ToolAgentHandler") -> None:  # noqa: B027 (most agents run any task)
        """`ValueError` if this agent cannot run `task` (checked at submission)."""

    def sandbox_spec(self, spec: "SandboxSpec") -> "SandboxSpec":
        """The task's sandbox as this agent needs it (e.g. a larger address space)."""
        return spec

    def warm_tools(self, ctx: RolloutContext, task: "ToolAgentHandler") -> list[str]:
        """Tools whose sessions start during INIT, while the task is prepared."""
        return []

    @abstractmethod
    async def run(self, ctx: RolloutContext, task: "ToolAgentHandler") -> AgentResult:
        """RUN: drive `ctx.llm` on `task` until the agent ends. An `AgentError` still leaves
        `result(ctx)` to grade."""

    @abstractmethod
    def result(self, ctx: RolloutContext) -> AgentResult:
        """What this agent did in the rollout so far (an empty result if RUN never started)."""

    def final_result(self, ctx: RolloutContext, task: "ToolAgentHandler") -> dict[str, Any]:
        """Extra trajectory fields about the agent's run (`metadata`)."""
        return {}
