"""`remote_verify`: the reward comes from a NeMo Gym-style resources server.

Task instance:

    {"verifier": {"url": "http://verifier:8000", "timeout_s": 60,
                  "policy_failure_kinds": [...], "infra_failure_reasons": [...]},
     "row": {"responses_create_params": {"input": [{"role": "user", "content": "..."}],
                                         "instructions": "..."},
             ...},                      # the dataset row, sent as is
     "agent": {...}}                    # optional: work with tools, then submit(answer=...)

RUN: the policy gets the row's `responses_create_params` (`instructions` and `input`, text
messages only) and answers (see `FinalAnswer`). EVAL seeds a session with the row,
posts the row plus the policy's work as a Responses `response` (`responses_output`) to
`/verify` with the session cookie, and closes the session (`resources_client`).

How the `/verify` answer maps onto outcomes (`failure_kind`, or NeMo Gym's own
`_ng_failure_class` when it is absent, is the failure's kind):
- a finite `reward` and no failure kind: ok, the reward as given;
- a failure kind in `policy_failure_kinds` (the policy's doing): ok, the reward as given;

Everything below, once `/verify` saw the policy's work, is blamed by a control (`control.py`):
the same row is verified once more with an empty answer (once per row and verifier settings,
cached; a control the verifier did not answer, by a timeout, an unreachable server or an HTTP
error, is not kept: the next failure asks again). If that gets a reward, the policy's work is
what broke the verifier (it hung it, crashed it, made it report a failure): ok, 0
[`verifier_failed_on_answer`; the failure and the control's result in `failure` and
`control`]. If the empty answer fails too, the verifier is broken for everyone: infra_error
with the cause below, naming both failures. A failure of `/seed_session` (it sees only the
row) is infra_error at once.

- any other failure kind (NeMo Gym's `judge_failed` or `transient`, a kind we do not know),
  or a `failure_reason` in `infra_failure_reasons`: infra_error `verifier_reported_failure`;
- `reward` missing, not a number, NaN or infinite: infra_error `verifier_bad_reward`;
- `mask_sample: true`: the outcome and reward as above, and `metadata.mask_sample = true`:
  a trainer must not train on the sample;
- a server that is down, slow, answers an error status, no JSON object or too much:
  infra_error `verifier_timeout`, `verifier_unreachable`, `verifier_http_error`,
  `verifier_bad_answer`, `verifier_answer_too_large`;
- the policy's `response` over `MAX_RESPONSE_BYTES`: ok, 0 (`response_too_large`), not sent.

`failure_reason` and `failure_kind` are kept in `reward_info`, with the answer's other short
scalar fields (`verifier_fields`); the exchange (timing, how the session closed) is in
`metadata.remote_verify`.
"""

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from agentroll.handlers.agent import (
    ANSWER_TOOLS,
    SUBMIT_ANSWER_PROMPT,
    AgentConfig,
    FinalAnswer,
    ToolAgentHandler,
)
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.control import CONTROLS, ControlResult, blamed, content_key
from agentroll.handlers.builtin.remote_verify.resources_client import (
    SeedFailure,
    Verification,
    VerifierFailure,
    encoded,
    verify_remotely,
)
from agentroll.handlers.builtin.remote_verify.responses_output import response_object
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.server.schema.messages import ChatMessage, Role

DEFAULT_POLICY_FAILURE_KINDS = (
    "agent_error",
    "policy_error",
    "format_error",
    "no_answer",
    "invalid_answer",
)
NG_FAILURE_CLASS = "_ng_failure_class"
MAX_RESPONSE_BYTES = 4 << 20
MAX_SHOWN_CHARS = 2_000
MAX_FIELDS, MAX_FIELD_CHARS = 32, 200
READ_FIELDS = frozenset(
    {"reward", "mask_sample", "failure_kind", "failure_reason", NG_FAILURE_CLASS}
)
STATE_KEY, PROMPT_KEY, INSTANCE_KEY = "remote_verify", "remote_verify_prompt", "remote_verify_task"
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}


class VerifierSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: AnyHttpUrl
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Per call.")
    policy_failure_kinds: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POLICY_FAILURE_KINDS), max_length=64
    )
    infra_failure_reasons: list[str] = Field(default_factory=list, max_length=64)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ValueError(f"{where}: only text content is supported")


def row_messages(row: Mapping[str, Any]) -> list[ChatMessage]:
    """The prompt a row's `responses_create_params` describes; `ValueError` if unsupported."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise ValueError("row.responses_create_params must be an object")
    messages: list[ChatMessage] = []
    instructions = params.get("instructions")
    if instructions:
        messages.append({"role": "system", "content": _text(instructions, "instructions")})
    items = params.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ValueError("row.responses_create_params.input must be text or a list of messages")
    for i, item in enumerate(items):
        where = f"row.responses_create_params.input[{i}]"
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise ValueError(f"{where}: only messages are supported")
        role = ROLES.get(str(item.get("role")))
        if role is None:
            raise ValueError(f"{where}: role must be one of {sorted(ROLES)}")
        messages.append({"role": role, "content": _text(item.get("content"), where)})
    if not any(m["role"] == "user" for m in messages):
        raise ValueError("row.responses_create_params.input has no user message")
    return messages


class RemoteVerifyInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verifier: VerifierSpec
    row: dict[str, Any]
    agent: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _row_is_usable(self) -> "RemoteVerifyInstance":
        row_messages(self.row)
        return self


def _reported(answer: Mapping[str, Any], key: str) -> str | None:
    value = answer.get(key)
    return None if value in (None, "") else str(value)[:MAX_FIELD_CHARS]


def verdict(answer: Mapping[str, Any], spec: VerifierSpec) -> Reward:
    """The reward a `/verify` answer gives; `VerifierFailure` where it gives none."""
    kind = _reported(answer, "failure_kind") or _reported(answer, NG_FAILURE_CLASS)
    reason = _reported(answer, "failure_reason")
    mask = answer.get("mask_sample")
    if mask is not None and not isinstance(mask, bool):
        raise VerifierFailure(
            f"mask_sample is not a boolean: {mask!r:.100}", cause="verifier_bad_answer"
        )
    if (kind is not None and kind not in spec.policy_failure_kinds) or (
        reason is not None and reason in spec.infra_failure_reasons
    ):
        raise VerifierFailure(
            f"the verifier reported a failure (kind {kind!r}, reason {reason!r}) that is not "
            "the policy's doing",
            cause="verifier_reported_failure",
        )
    reward = answer.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise VerifierFailure(
            f"reward {reward!r:.100} is not a finite number", cause="verifier_bad_reward"
        )
    info: dict[str, Any] = {
        "failure_kind": kind,
        "failure_reason": reason,
        "mask_sample": bool(mask),
    }
    return Reward(float(reward), info)


def other_fields(answer: Mapping[str, Any], sent: Mapping[str, Any]) -> dict[str, Any]:
    """The answer's short scalar fields beyond what was sent and what `verdict` reads."""
    out: dict[str, Any] = {}
    for key, value in answer.items():
        if key in READ_FIELDS or key in sent or len(out) >= MAX_FIELDS:
            continue
        if isinstance(value, str):
            out[key[:MAX_FIELD_CHARS]] = value[:MAX_FIELD_CHARS]
        elif isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
            out[key[:MAX_FIELD_CHARS]] = value
    return out


UNANSWERED = frozenset({"verifier_timeout", "verifier_unreachable", "verifier_http_error"})
"""Control failures not kept (`ControlResult.keep`): the next failure asks again."""


async def control_verification(task: RemoteVerifyInstance) -> ControlResult:
    """The verifier on the control: the row with an empty answer (one empty message)."""
    spec = task.verifier
    model = str(task.row["responses_create_params"].get("model") or "policy")
    body = encoded({**task.row, "response": response_object([], None, "", model)})
    try:
        verification = await verify_remotely(str(spec.url), task.row, body, spec.timeout_s)
        reward = verdict(verification.answer, spec)
    except VerifierFailure as exc:
        # A verifier down, slow or overloaded for a moment says nothing lasting about the row.
        keep = exc.cause not in UNANSWERED
        return ControlResult(False, f"on an empty answer: {exc}", keep=keep)
    return ControlResult(True, f"an empty answer was verified: reward {reward.value:g}")


class RemoteVerifyHandler(ToolAgentHandler):
    name = "remote_verify"
    instance_model = RemoteVerifyInstance
    system_prompt = SUBMIT_ANSWER_PROMPT
    default_tools = ANSWER_TOOLS
    final_answer: ClassVar[FinalAnswer] = FinalAnswer()

    @staticmethod
    def task(ctx: RolloutContext) -> RemoteVerifyInstance:
        return parsed_instance(ctx, RemoteVerifyInstance, INSTANCE_KEY)

    def prompt(self, ctx: RolloutContext, default_system: str) -> list[ChatMessage]:
        messages = row_messages(self.task(ctx).row)
        if messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": default_system})
        ctx.state[PROMPT_KEY] = len(messages)  # what follows is the policy's work
        return messages

    def plain_messages(self, ctx: RolloutContext) -> list[ChatMessage]:
        return self.prompt(ctx, self.final_answer.plain_system_prompt)

    def first_messages(self, ctx: RolloutContext, config: AgentConfig) -> list[ChatMessage]:
        return self.prompt(ctx, config.system_prompt or self.system_prompt)

    def task_prompt(self, ctx: RolloutContext) -> str:
        users = [m for m in row_messages(self.task(ctx).row) if m["role"] == "user"]
        return str(users[-1]["content"])

    def response(self, ctx: RolloutContext, result: AgentResult, answer: str) -> dict[str, Any]:
        """The policy's work as the Responses object `/verify` grades."""
        recorded = PROMPT_KEY in ctx.state
        conversation = list(ctx.llm.messages)[ctx.state[PROMPT_KEY] :] if recorded else []
        submission = result.submission
        submitted = None if submission is None else str(submission.get("answer", ""))
        params = self.task(ctx).row["responses_create_params"]
        return response_object(
            conversation, submitted, answer, str(params.get("model") or "policy")
        )

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        task = self.task(ctx)
        answer = self.final_answer.given(ctx, result) or ""
        shown = {"predicted": answer[:MAX_SHOWN_CHARS]}
        body = encoded({**task.row, "response": self.response(ctx, result, answer)})
        if len(body) - len(encoded(task.row)) > MAX_RESPONSE_BYTES:
            return Reward(0.0, {**shown, "reason": "response_too_large"})
        spec = task.verifier
        try:
            verification = await verify_remotely(str(spec.url), task.row, body, spec.timeout_s)
            reward = verdict(verification.answer, spec)
        except SeedFailure:
            raise  # before the server saw the policy's work: never its doing
        except VerifierFailure as failure:
            control = await CONTROLS.result(
                content_key(self.name, task.row, spec.model_dump(mode="json")),
                lambda: control_verification(task),
            )
            return blamed(failure, "verifier_failed_on_answer", control, shown)
        ctx.state[STATE_KEY] = verification
        sent = {**task.row, "response": None}
        reward.info = {
            **shown,
            **reward.info,
            "verifier_fields": other_fields(verification.answer, sent),
        }
        return reward

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        verification: Verification | None = ctx.state.get(STATE_KEY)
        if verification is None:
            return out
        answer = verification.answer
        exchange = {"seconds": round(verification.seconds, 4), "session": verification.session}
        metadata: dict[str, Any] = {**out.get("metadata", {}), "remote_verify": exchange}
        if answer.get("mask_sample") is True:
            metadata["mask_sample"] = True
        out["metadata"] = metadata
        return out
