"""`llm_judge`: free-form answers scored by a judge model, a registered backend chosen by tag.

Task instance:

    {"question": str,
     "reference": str,                  # optional: what a right answer says
     "rubric": "...{{ answer }}...",    # optional Jinja2 template (see `judge_prompt`)
     "judge": {"tag": "judge", "policy": null, "max_tokens": 1024, "timeout_s": 120},
     "agent": {...}}                    # optional: work with tools, then submit(answer=...)

RUN: the policy answers the question (its whole final reply is the answer; see
`FinalAnswer`). EVAL asks the judge through `ctx.ask_judge` (greedy; never part of
the trajectory or the policy's token budget; latency and tokens are the server's
`agentroll_judge_*` metrics) and reads a final `Score: N/10` line: reward N/10.

Outcomes (`reward_info.reason` in brackets):
- the judge gave a score: ok, reward N/10 [`judged`; `score`, the judge's timing and tokens];
- no answer: ok, 0 [`no answer`];
- an answer over `MAX_JUDGED_ANSWER_CHARS`: ok, 0 [`answer_too_long`], not judged;
- an answer carrying the score format (`Score: 10/10`): ok, 0 [`score_format_in_answer`],
  not judged;
- no judge backend, a judge call that fails or times out: infra_error `judge_unavailable`;
- a reply without a final score line, or a judge prompt too long for the judge's context:
  blamed by a control (`control.py`): the judge is asked once more, about the reference answer
  (an empty answer without one), cached per task. Judged: the policy's answer broke the
  judgment: ok, 0 [`judge_unparseable` / `judge_context_overflow`; the failure and the
  control's result in `failure` and `control`]. Not judged either: infra_error
  `judge_unparseable` / `judge_context_overflow`, naming both failures. The unparseable reply
  (bounded) is in `metadata.judge.raw`.

Prompt injection: the answer is delimited and the judge told it is untrusted (see
`judge_prompt`), and an answer carrying the score format is not judged at all. A judge model
that still follows instructions written in the answer in other words can be steered by them:
that is the judge model's weakness, and `tests/integration/handlers/test_llm_judge.py` shows it
with a scripted judge that obeys them.
"""

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentroll.handlers.agent import (
    ANSWER_TOOLS,
    SUBMIT_ANSWER_PROMPT,
    FinalAnswer,
    ToolAgentHandler,
    no_answer,
)
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.control import CONTROLS, ControlResult, blamed, content_key
from agentroll.handlers.builtin.llm_judge.judge_prompt import (
    DEFAULT_RUBRIC,
    addresses_the_judge,
    check_rubric,
    judge_messages,
    parse_score,
)
from agentroll.handlers.context import JudgeReply, Reward, RolloutContext
from agentroll.handlers.errors import ContextLengthExceeded, InfraError, LLMUnavailable

MAX_JUDGED_ANSWER_CHARS = 20_000
"""Longer answers are reward 0 unjudged: a judge prompt the policy made too long for the
judge's context would otherwise end `infra_error`, the policy's failure disguised."""
MAX_SHOWN_CHARS = 2_000
"""How much of the answer `reward_info.predicted` keeps."""
MAX_RAW_CHARS = 4_000
"""How much of the judge's reply the trajectory keeps."""
STATE_KEY = "llm_judge"
INSTANCE_KEY = "llm_judge_instance"


class JudgeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str = Field("judge", min_length=1, max_length=128)
    """Judge calls go to backends registered with this tag."""
    policy: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
    """The policy those backends serve (default: the one policy of the tagged backends)."""
    max_tokens: int = Field(1024, ge=16, le=32_768)
    timeout_s: float = Field(120.0, gt=0, le=3600)


class LLMJudgeInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = Field(..., min_length=1, max_length=100_000)
    reference: str | None = Field(None, max_length=100_000)
    rubric: str = Field(DEFAULT_RUBRIC, min_length=1, max_length=50_000)
    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    agent: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _rubric_renders(self) -> "LLMJudgeInstance":
        check_rubric(self.rubric, has_reference=self.reference is not None)
        return self


def judgment_record(reply: JudgeReply) -> dict[str, Any]:
    """What the trajectory keeps of one judgment (`metadata.judge`)."""
    return {
        "backend": reply.backend_id,
        "seconds": round(reply.seconds, 4),
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "finish_reason": reply.finish_reason,
        "raw": reply.text[:MAX_RAW_CHARS],
    }


class LLMJudgeHandler(ToolAgentHandler):
    name = "llm_judge"
    instance_model = LLMJudgeInstance
    system_prompt = SUBMIT_ANSWER_PROMPT
    default_tools = ANSWER_TOOLS
    final_answer: ClassVar[FinalAnswer] = FinalAnswer()

    @staticmethod
    def task(ctx: RolloutContext) -> LLMJudgeInstance:
        return parsed_instance(ctx, LLMJudgeInstance, INSTANCE_KEY)

    def task_prompt(self, ctx: RolloutContext) -> str:
        return self.task(ctx).question

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        predicted = self.final_answer.given(ctx, result)
        if predicted is None:
            return no_answer()
        task = self.task(ctx)
        info: dict[str, Any] = {"predicted": predicted[:MAX_SHOWN_CHARS]}
        if len(predicted) > MAX_JUDGED_ANSWER_CHARS:
            return Reward(0.0, {**info, "reason": "answer_too_long"})
        if addresses_the_judge(predicted):
            return Reward(0.0, {**info, "reason": "score_format_in_answer"})
        try:
            reply = await self._judge(ctx, task, predicted)
        except ContextLengthExceeded as exc:
            failure = InfraError(
                f"the judge prompt does not fit the judge's context: {exc}",
                cause="judge_context_overflow",
            )
            return await self._blame(ctx, task, failure, "judge_context_overflow", info)
        record = judgment_record(reply)
        ctx.state[STATE_KEY] = record
        score = parse_score(reply.text)
        if score is None:
            failure = InfraError(
                f"the judge's reply (finish_reason {reply.finish_reason}) does not end with "
                f"`Score: N/10`: {reply.text[-500:]!r}",
                cause="judge_unparseable",
            )
            return await self._blame(ctx, task, failure, "judge_unparseable", info)
        judge = {k: v for k, v in record.items() if k != "raw"}
        return Reward(score / 10, {**info, "reason": "judged", "score": score, "judge": judge})

    @staticmethod
    async def _judge(ctx: RolloutContext, task: LLMJudgeInstance, answer: str) -> JudgeReply:
        """The judge's reply on `answer`; `ContextLengthExceeded` if its prompt does not fit."""
        spec = task.judge
        messages = judge_messages(task.rubric, task.question, task.reference, answer)
        try:
            return await ctx.ask_judge(
                messages,
                tag=spec.tag,
                policy=spec.policy,
                max_tokens=spec.max_tokens,
                timeout_s=spec.timeout_s,
            )
        except LLMUnavailable as exc:
            raise InfraError(f"the judge did not answer: {exc}", cause="judge_unavailable") from exc

    async def _blame(
        self,
        ctx: RolloutContext,
        task: LLMJudgeInstance,
        failure: InfraError,
        reason: str,
        info: dict[str, Any],
    ) -> Reward:
        """Re-ask the judge with the control answer (the reference, else an empty answer):
        if that is judged, the policy's answer broke the judgment (0, `reason`)."""

        async def control() -> ControlResult:
            try:
                reply = await self._judge(ctx, task, task.reference or "")
            except ContextLengthExceeded as exc:
                return ControlResult(False, f"the control's prompt does not fit either: {exc}")
            score = parse_score(reply.text)
            if score is None:
                return ControlResult(False, f"the control's judgment is unparseable too: "
                                            f"{reply.text[-500:]!r}")  # fmt: skip
            return ControlResult(True, f"the control answer was judged Score: {score}/10")

        key = content_key(
            self.name, task.question, task.reference, task.rubric, task.judge.model_dump()
        )
        return blamed(failure, reason, await CONTROLS.result(key, control), info)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        record = ctx.state.get(STATE_KEY)
        if record is not None:
            out["metadata"] = {**out.get("metadata", {}), "judge": record}
        return out
