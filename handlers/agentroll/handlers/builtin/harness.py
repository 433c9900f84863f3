"""`harness`: run a third-party agent harness, unmodified, in the sandbox; score it with a
built-in evaluator.

Task instance:

    {"harness": {"type": "mini_swe_agent", "timeout_s": 900},   # or {"type": "shell", ...}
     "evaluator": "swe",            # swe | harbor | code | math | stem | llm_judge | remote_verify:
                                    #   whose INIT and EVAL to use
     "task": {...},                 # an instance of that evaluator (validated by it)
     "instruction": null}           # what the harness is told; default: the task's statement

INIT is the evaluator's (a `swe` checkout, a `code` workspace; a default sandbox for answer
tasks). RUN opens the rollout's recording LLM proxy in the sandbox and runs the harness
there on the instruction, with `OPENAI_BASE_URL`/`OPENAI_API_KEY` pointing at it, bounded by
`timeout_s` and the proxy's caps (`max_calls`, default the job's `limits.max_turns`;
`max_sampled_tokens`; time). EVAL is the evaluator's: the repository's tests, the hidden
unit tests, or answer matching on the model's last reply. The trajectory's token fields are
rebuilt from the proxy's recorded calls (see `agentroll.server.proxy`).

Outcomes: a harness that exits non-zero is `agent_error` (its exit code and stderr tail in
the message), one stopped by a cap or its time limit too (still scored); a proxy or bridge
failure is `infra_error`. Its time limit is `timeout_s` clipped to RUN's budget
(`agentroll.handlers.budget`), so a harness that would outlive RUN's timeout is killed and
graded (`harness_timeout`), never `timed_out`.
"""

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import ToolAgentHandler
from agentroll.handlers.base import AgentHandler, parsed_instance
from agentroll.handlers.budget import run_budget
from agentroll.handlers.context import ProxyLimits, Reward, RolloutContext
from agentroll.handlers.harness.config import HarnessConfig
from agentroll.handlers.harness.runner import new_folder, outcome_error, run_harness
from agentroll.handlers.harness.view import TaskView
from agentroll.handlers.plugins import load_object
from agentroll.handlers.toolcalls import get_parser

EVALUATORS = {
    "swe": "agentroll.handlers.builtin.swe:SweHandler",
    "harbor": "agentroll.handlers.builtin.harbor.handler:HarborHandler",
    "code": "agentroll.handlers.builtin.code:CodeHandler",
    "math": "agentroll.handlers.builtin.math:MathHandler",
    "stem": "agentroll.handlers.builtin.stem:StemHandler",
    "llm_judge": "agentroll.handlers.builtin.llm_judge:LLMJudgeHandler",
    "remote_verify": "agentroll.handlers.builtin.remote_verify:RemoteVerifyHandler",
}
EvaluatorName = Literal["swe", "harbor", "code", "math", "stem", "llm_judge", "remote_verify"]
STATE_KEY = "harness"
# mini-swe-agent's exit statuses, as trajectory finish reasons.
FINISH_BY_EXIT_STATUS = {"Submitted": "submit", "LimitsExceeded": "max_turns"}


class HarnessInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    harness: HarnessConfig
    evaluator: EvaluatorName = "swe"
    task: dict[str, Any]
    instruction: str | None = Field(None, min_length=1)


@cache
def evaluator(name: str) -> ToolAgentHandler:
    """The shared handler instance that initialises and scores `name` tasks."""
    cls = load_object(EVALUATORS[name])
    assert isinstance(cls, type) and issubclass(cls, ToolAgentHandler)
    return cls()


class HarnessHandler(AgentHandler):
    name = "harness"
    instance_model = HarnessInstance
    eval_sandbox = "reuse"  # the evaluators read the agent's work from the RUN sandbox

    def validate_instance(self, instance: dict[str, Any]) -> None:
        super().validate_instance(instance)
        spec = HarnessInstance.model_validate(instance)
        try:
            get_parser(spec.harness.parser)
        except LookupError as exc:
            raise ValueError(f"invalid {self.name} instance: harness.parser: {exc}") from exc
        evaluator(spec.evaluator).validate_instance(spec.task)

    @staticmethod
    def spec(ctx: RolloutContext) -> HarnessInstance:
        return parsed_instance(ctx, HarnessInstance, "harness_instance")

    def view(self, ctx: RolloutContext) -> TaskView:
        return TaskView(ctx, self.spec(ctx).task)

    def instruction(self, ctx: RolloutContext) -> str:
        spec = self.spec(ctx)
        if spec.instruction is not None:
            return spec.instruction
        statement = spec.task.get("problem_statement")  # SWE-style tasks: the issue itself
        if isinstance(statement, str):
            return statement
        return evaluator(spec.evaluator).task_prompt(self.view(ctx))

    async def init(self, ctx: RolloutContext) -> None:
        spec = self.spec(ctx)
        # The sandbox opened here is the one the harness runs in.
        view = TaskView(ctx, spec.task, address_space_bytes=spec.harness.address_space_bytes)
        judge = evaluator(spec.evaluator)
        await judge.init(view)
        if ctx.sandbox is None:  # answer tasks run without a sandbox; a harness needs one
            await view.open_sandbox(judge.sandbox_spec(view))
            await judge.prepare(view)

    async def run(self, ctx: RolloutContext) -> None:
        harness = self.spec(ctx).harness
        sandbox = ctx.sandbox
        assert sandbox is not None, "INIT opens the sandbox"
        limits = ProxyLimits(
            max_calls=harness.max_calls or ctx.limits.max_turns,
            max_sampled_tokens=harness.max_sampled_tokens,
            time_limit_s=harness.timeout_s,
        )
        proxy = await ctx.open_llm_proxy(sandbox, limits=limits, parser=harness.parser)
        folder = new_folder()
        launch = harness.launch(self.instruction(ctx), folder, proxy.model)
        # Its budget ends inside RUN's timeout: one that runs it out is killed and graded.
        timeout = max(1.0, run_budget(ctx, harness.timeout_s))
        run = await run_harness(
            sandbox, proxy, launch, folder=folder, timeout_s=timeout, python=harness.python
        )
        ctx.state[STATE_KEY] = run
        ctx.state["final_text"] = proxy.last_reply or ""  # what answer tasks are scored on
        await proxy.close()
        status = (run.report or {}).get("info", {}).get("exit_status")
        error = outcome_error(run, timeout)
        if error is not None:
            raise error
        ctx.set_finish_reason(FINISH_BY_EXIT_STATUS.get(str(status), "harness_exit"))

    async def eval(self, ctx: RolloutContext) -> Reward:
        return await evaluator(self.spec(ctx).evaluator).eval(self.view(ctx))

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        spec = self.spec(ctx)
        out = evaluator(spec.evaluator).final_result(self.view(ctx))
        info: dict[str, Any] = {"type": spec.harness.type, "evaluator": spec.evaluator}
        run = ctx.state.get(STATE_KEY)
        if run is not None:
            info.update(run.summary())
            report_info = (run.report or {}).get("info", {})
            if isinstance(report_info, dict) and "exit_status" in report_info:
                info["exit_status"] = report_info["exit_status"]
        out["metadata"] = {**out.get("metadata", {}), "harness": info}
        return out
