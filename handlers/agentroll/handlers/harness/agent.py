"""The harness agents: each harness preset (`HarnessConfig`'s `type`) as an agent.

    {"task": "swe", "agent": {"type": "mini_swe_agent", "timeout_s": 900}, "instance": {...}}

INIT is the task's, in a sandbox with the harness's address space where it sets one. RUN
opens the rollout's recording LLM proxy in the sandbox and runs the harness there on the
instruction (by default the task's own prompt), with `OPENAI_BASE_URL`/`OPENAI_API_KEY`
pointing at it, bounded by `timeout_s` and the proxy's caps (`max_calls`, default the job's
`limits.max_turns`; `max_sampled_tokens`; time). The model's last reply is the
`AgentResult.final_text` the task grades (answer tasks); a task that grades the sandbox reads
what the harness left there. The trajectory's token fields are rebuilt from the proxy's
recorded calls (see `agentroll.server.proxy`).

Outcomes: a harness that exits non-zero is `agent_error` (its exit code and stderr tail in
the message), one stopped by a cap or its time limit too (still graded); a proxy or bridge
failure is `infra_error`. A task with tools of its own (`serves_mcp_tools`: an OpenEnv
environment's) opens them just before the harness starts and closes them when it ends; they
are served on the proxy's `/mcp` and written into the preset's configuration (`with_mcp`;
presets without one are refused at submission). The proxy closes when the harness's run
ends, on every path, and before the tools do: a tool call still in flight is finished (up to
`MCP_WAIT_S`, within what is left of the harness's budget; not on a cancellation) and its
reward recorded. Its time limit is `timeout_s` clipped to RUN's budget
(`agentroll.handlers.budget`), so a harness that would outlive RUN's timeout is killed and
graded (`harness_timeout`), never `timed_out`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from pydantic import TypeAdapter

from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.budget import run_budget
from agentroll.handlers.context import ProxyLimits, RolloutContext
from agentroll.handlers.harness.config import HarnessConfig
from agentroll.handlers.harness.runner import HarnessRun, new_folder, outcome_error, run_harness
from agentroll.handlers.mcp import McpServer, ToolSource
from agentroll.handlers.toolcalls import get_parser
from agentroll.runtime import SandboxSpec

if TYPE_CHECKING:
    from agentroll.handlers.agent.handler import ToolAgentHandler

STATE_KEY = "harness"
# mini-swe-agent's exit statuses, as trajectory finish reasons.
FINISH_BY_EXIT_STATUS = {"Submitted": "submit", "LimitsExceeded": "max_turns"}
HARNESS_CONFIG: TypeAdapter[HarnessConfig] = TypeAdapter(HarnessConfig)
MCP_PRESETS = tuple(
    preset.model_fields["type"].default
    for preset in get_args(get_args(HarnessConfig)[0])
    if preset.speaks_mcp
)
"""The presets that can be given a task's MCP tools (`speaks_mcp`)."""
MCP_WAIT_S = 60.0
"""How long a tool call still in flight when the harness's run ends may take to finish (the
environment may already have applied it); an OpenEnv tool's own bound is 30 s."""


@dataclass(frozen=True)
class HarnessRecord:
    """One rollout's harness run and the model's last reply."""

    run: HarnessRun
    last_reply: str


class HarnessAgent(Agent):
    takes_mcp_tools = True

    def __init__(self, harness: HarnessConfig, instruction: str | None = None) -> None:
        self.harness = harness
        self.instruction = instruction
        """What the harness is told; None: the task's own prompt."""

    @classmethod
    def from_config(cls, kind: str, config: Mapping[str, Any]) -> "HarnessAgent":
        harness = HARNESS_CONFIG.validate_python({**config, "type": kind})
        cls.check_parser(harness)
        return cls(harness)

    @staticmethod
    def check_parser(harness: HarnessConfig) -> None:
        try:
            get_parser(harness.parser)
        except LookupError as exc:
            raise ValueError(f"harness.parser: {exc}") from exc

    def check(self, task: "ToolAgentHandler") -> None:
        if task.serves_mcp_tools and not self.harness.speaks_mcp:
            raise ValueError(
                f"the {task.name} task's tools reach a harness over MCP, and agentroll does not "
                f"write {self.harness.type}'s MCP configuration (it does for: "
                f"{', '.join(MCP_PRESETS)})"
            )

    def sandbox_spec(self, spec: SandboxSpec) -> SandboxSpec:
        space = self.harness.address_space_bytes
        if space is None:
            return spec
        limits = spec.limits.model_copy(update={"max_memory_bytes": space})
        return spec.model_copy(update={"limits": limits})

    def instruction_for(self, ctx: RolloutContext, task: "ToolAgentHandler") -> str:
        if self.instruction is not None:
            return self.instruction
        statement = ctx.instance.get("problem_statement")  # SWE-style tasks: the issue itself
        if isinstance(statement, str):
            return statement
        return task.task_prompt(ctx)

    async def run(self, ctx: RolloutContext, task: "ToolAgentHandler") -> AgentResult:
        if not task.serves_mcp_tools:
            return await self.run_with(ctx, task, None)
        # The task's tools live exactly as long as the harness's run (closed on every path).
        async with task.mcp_tools(ctx) as tools:
            return await self.run_with(ctx, task, tools)

    async def run_with(
        self, ctx: RolloutContext, task: "ToolAgentHandler", tools: ToolSource | None
    ) -> AgentResult:
        harness = self.harness
        sandbox = ctx.sandbox
        assert sandbox is not None, "INIT opens the sandbox"
        limits = ProxyLimits(
            max_calls=harness.max_calls or ctx.limits.max_turns,
            max_sampled_tokens=harness.max_sampled_tokens,
            time_limit_s=harness.timeout_s,
        )
        proxy = await ctx.open_llm_proxy(sandbox, limits=limits, parser=harness.parser)
        # Closed on every path before the task's tools are: a tool call still in flight is
        # finished and recorded first.
        try:
            folder = new_folder()
            launch = harness.launch(self.instruction_for(ctx, task), folder, proxy.model)
            if tools is not None:
                proxy.serve_mcp(McpServer(tools).answer)
                launch = harness.with_mcp(launch, folder, tools.name)
            # Its budget ends inside RUN's timeout: one that runs it out is killed and graded.
            timeout = max(1.0, run_budget(ctx, harness.timeout_s))
            run = await run_harness(
                sandbox, proxy, launch, folder=folder, timeout_s=timeout, python=harness.python
            )
            ctx.state[STATE_KEY] = HarnessRecord(run, proxy.last_reply or "")
        finally:
            # Within what is left of its budget: waiting must not carry RUN past its timeout.
            await proxy.close(mcp_wait_s=min(MCP_WAIT_S, run_budget(ctx)))
        error = outcome_error(run, timeout)
        if error is not None:
            raise error
        finish = FINISH_BY_EXIT_STATUS.get(str(self.exit_status(run)), "harness_exit")
        ctx.set_finish_reason(finish)
        return self.result(ctx)

    @staticmethod
    def exit_status(run: HarnessRun) -> object:
        return (run.report or {}).get("info", {}).get("exit_status")

    def result(self, ctx: RolloutContext) -> AgentResult:
        record = ctx.state.get(STATE_KEY)
        if not isinstance(record, HarnessRecord):
            return AgentResult()
        return AgentResult(record.last_reply)

    def final_result(self, ctx: RolloutContext, task: "ToolAgentHandler") -> dict[str, Any]:
        info: dict[str, Any] = {"type": self.harness.type, "evaluator": task.name}
        record = ctx.state.get(STATE_KEY)
        if isinstance(record, HarnessRecord):
            info.update(record.run.summary())
            report_info = (record.run.report or {}).get("info", {})
            if isinstance(report_info, dict) and "exit_status" in report_info:
                info["exit_status"] = report_info["exit_status"]
        return {"metadata": {"harness": info}}
