"""`verifiers_legacy`: a row of a legacy verifiers environment, run unmodified.

A legacy environment (verifiers 0.3.1's `verifiers.legacy`, `import verifiers as vf`) is a
package exporting `load_environment(**kwargs) -> vf.Environment`: a `SingleTurnEnv`,
`MultiTurnEnv` (`env_response` and its stop conditions drive the turns) or `ToolEnv` (python
functions as tools) over a `datasets.Dataset` of rows, scored by a `vf.Rubric` of weighted
reward functions. Task instance (`legacy_instances()` makes one per row):

    {"environment": {"id": "my-env",                 # load_environment's environment id
                     "args": {...},                  # its keyword arguments
                     "packages": ["my-env==0.2"],    # pip requirements that install it
                     "score_timeout_s": 60},
     "row": {"prompt": [...], "answer": ..., "info": {...}, "example_id": 0, ...}}

INIT installs (once, cached) the environment's virtual environment on the legacy lock
(`venv.LEGACY`) and reads the row's tools. RUN is the environment's own `rollout()`, in a
child of a verifiers worker forked for it (`legacy_worker.py`), its model client relayed to
the rollout's session: each prompt's new messages (the row's prompt, then `env_response`'s
messages: a `ToolEnv`'s tool answers, a game's feedback) go in masked out, each reply is
sampled with agentroll's exact tokens, its tool calls parsed (Hermes) and handed back as
verifiers' `ToolCall`s. After `limits.max_turns` replies, once RUN's time budget can no longer
wait out two more of the environment's steps (`score_timeout_s` each: `finish_reason`
`wall_time`), or once the policy's context is full, the next model call ends the rollout (as a
model error ends verifiers' loop; the full context is then `agent_error`, scored). Then, in
the same child, the rubric scores the final state: `reward` is the weighted sum of its reward
functions, as verifiers sums it.

Whose fault a failure is (blamed by a control, `control.py`: the same row played with an
empty reply to every turn, each answered by the server as the policy's are, then scored):
- the environment cannot load, or needs what is not run (group rewards, LLM judges, a rubric
  that scores by its own `score_rollout`): infra_error `verifiers_load_failed`;
- the environment rewrote the conversation between two turns (an earlier message, the
  policy's reply included, is not as it was exchanged; checked by the worker, not by the
  rollout's child): infra_error `verifiers_env_rewrote_history`;
- the rollout raised (its `env_response`, a stop condition), stopped on a `vf.Error`, or its
  code (the rollout's or the rubric's) ran past `score_timeout_s` between two replies or
  after the last, or killed its worker, both times it was played (the second in a fresh
  worker, answered with the same replies: `reward_info.rollout_attempts`): ok, reward 0,
  `environment_failed_on_answer`, if the control plays through and is scored; else
  infra_error `verifiers_env_failed`;
- a reward function raised or gave no finite score: ok, reward 0, `reward_failed_on_answer`,
  if the control is scored; else infra_error `verifiers_reward_failed`.
"""

from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import AgentConfig
from agentroll.handlers.base import AgentHandler, parsed_instance
from agentroll.handlers.builtin.control import CONTROLS, ControlResult, blamed, content_key
from agentroll.handlers.builtin.verifiers_env.episodes import (
    ENV_FAILED,
    empty_replies,
    out_of_time,
)
from agentroll.handlers.builtin.verifiers_env.handler import (
    MAX_REQUIREMENTS,
    MAX_SHOWN_CHARS,
    PYTHON_KEY,
    TOOLS_KEY,
    scored_reward,
)
from agentroll.handlers.builtin.verifiers_env.replays import (
    RecordedTurns,
    played_twice,
    replay_shown,
)
from agentroll.handlers.builtin.verifiers_env.venv import LEGACY, ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import (
    Turns,
    asked,
    load_failure,
)
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import (
    AgentError,
    ContextLengthExceeded,
    InfraError,
    VerifiersRewardFailed,
    VerifiersWorkerFailure,
)
from agentroll.handlers.toolcalls import (
    SchemaAwareParser,
    ToolCallParser,
    assistant_message,
    get_parser,
)
from agentroll.server.schema.messages import ChatMessage, ToolSpec

INSTANCE_KEY, RESULT_KEY = "verifiers_legacy", "verifiers_legacy_result"
HISTORY_REWRITTEN = "verifiers_env_rewrote_history"
"""The environment rewrote the conversation between turns: what it would score is not what
the policy's tokens were sampled on. Never blamed on the policy by a control: empty replies
need not provoke what a reply did."""
TOOLS_TIMEOUT_S = 120.0


class LegacyEnvironmentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    packages: list[str] = Field(default_factory=list, max_length=MAX_REQUIREMENTS)
    score_timeout_s: float = Field(60.0, gt=0, le=3600)

    def loaded(self) -> dict[str, Any]:
        """What the worker loads: `load_environment(id, **args)`."""
        return {"id": self.id, "args": self.args}


class LegacyInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: LegacyEnvironmentSpec
    row: dict[str, Any]


def chat_message(message: dict[str, Any]) -> ChatMessage:
    """A verifiers message (its JSON) as the session takes it: role, text, a tool answer's id."""
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts: their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    out: dict[str, Any] = {"role": message["role"], "content": str(content)}
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return cast(ChatMessage, out)


class Rollout:
    """The policy's side of one legacy rollout: answers each model call the environment
    makes with a reply sampled through the rollout's session (`turns`, which keeps them for
    a replay)."""

    def __init__(self, ctx: RolloutContext, tools: list[ToolSpec], score_timeout_s: float) -> None:
        self.ctx, self.tools, self.score_timeout_s = ctx, tools, score_timeout_s
        self.stopped: AgentError | None = None
        """The policy's error that ended the rollout (raised once it is scored)."""
        self.turns = RecordedTurns(self._next)
        parser = get_parser(AgentConfig().parser)
        if isinstance(parser, SchemaAwareParser):  # formats whose arguments are untyped text
            parser = parser.with_tools(tools)
        self.parser: ToolCallParser = parser

    async def _next(self, turn: list[dict[str, Any]]) -> dict[str, Any]:
        ctx, said = self.ctx, [chat_message(m) for m in turn]
        if ctx.llm.messages and ctx.llm.num_turns >= ctx.limits.max_turns:
            ctx.set_finish_reason("max_turns")
            return {"end": "max_turns"}
        if ctx.llm.messages and out_of_time(ctx, self.score_timeout_s):
            return {"end": "wall_time"}
        try:
            if not ctx.llm.messages:
                await ctx.llm.start(said, tools=self.tools)
            else:
                await ctx.llm.add_messages(said)
            sampled = await ctx.llm.generate()
        except AgentError as exc:  # the policy's doing (its context full): the rollout ends
            if isinstance(exc, ContextLengthExceeded):
                ctx.set_finish_reason("length")
            self.stopped = exc
            return {"end": exc.cause}
        if not self.tools:
            return {"reply": sampled.text}
        reply = self.parser.parse(sampled.text).with_call_ids(f"call_{ctx.llm.num_turns}_")
        ctx.llm.describe_last_reply(assistant_message(reply))  # readable view: tool_calls
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments_json()} for c in reply.calls]
        return {"reply": reply.content, "tool_calls": calls}


async def _ask(
    python: Path,
    request: dict[str, Any],
    timeout_s: float,
    answer: Turns | None = None,
    control: bool = False,
) -> dict[str, Any]:
    """The worker's reply; infra_error where no worker starts or the environment cannot
    load (before anything of the policy's was read). `control`: `answer` is a control's,
    answered at once (the request takes no episode's worker slot)."""
    reply = await asked(python, request, timeout_s, answer, answer_waits=not control)
    if not reply.get("ok") and reply.get("stage") == "load":
        raise load_failure(reply)
    if not reply.get("ok") and reply.get("stage") == "history":  # the worker's own verdict
        raise InfraError(f"{reply.get('error')}"[:4000], cause=HISTORY_REWRITTEN)
    return reply


def _failure(reply: dict[str, Any]) -> InfraError:
    """What a rollout's failed reply blames, if the control clears the environment."""
    if reply.get("stage") == "score":
        return VerifiersRewardFailed(f"a reward function failed: {reply.get('error')}"[:4000])
    return InfraError(
        f"the environment's rollout failed: {reply.get('error')}"[:4000], cause=ENV_FAILED
    )


class VerifiersLegacyHandler(AgentHandler):
    name = "verifiers_legacy"
    instance_model = LegacyInstance

    @staticmethod
    def task(ctx: RolloutContext) -> LegacyInstance:
        return parsed_instance(ctx, LegacyInstance, INSTANCE_KEY)

    async def init(self, ctx: RolloutContext) -> None:
        job = self.task(ctx)
        venv = await ensure_verifiers_venv(job.environment.packages, stack=LEGACY)
        ctx.state[PYTHON_KEY] = venv.python
        request = {"op": "legacy_tools", "environment": job.environment.loaded(), "row": job.row}
        try:
            reply = await _ask(venv.python, request, TOOLS_TIMEOUT_S)
        except VerifiersWorkerFailure as exc:  # before the policy said anything
            raise InfraError(str(exc), cause="verifiers_load_failed") from exc
        ctx.state[TOOLS_KEY] = reply["tools"]

    async def run(self, ctx: RolloutContext) -> None:
        job, python = self.task(ctx), ctx.state[PYTHON_KEY]
        spec = job.environment
        request = {
            "op": "legacy_rollout",
            "environment": spec.loaded(),
            "row": job.row,
        }
        rollout = Rollout(ctx, ctx.state[TOOLS_KEY], spec.score_timeout_s)

        async def play(turns: Turns) -> dict[str, Any]:
            return await _ask(python, request, spec.score_timeout_s, turns)

        try:  # a timeout or a dead worker: the replies', or the node's doing?
            result = await played_twice(ctx, play, rollout.turns, spec.score_timeout_s)
        except VerifiersWorkerFailure as failure:
            result = {"ok": False, "error": f"its code {failure.kind}: {failure}"}
        ctx.state[RESULT_KEY] = result
        if rollout.stopped is not None:  # agent_error, its rollout scored in EVAL
            raise rollout.stopped

    async def eval(self, ctx: RolloutContext) -> Reward:
        job = self.task(ctx)
        replies = [m["content"] for m in ctx.llm.messages if m["role"] == "assistant"]
        shown: dict[str, Any] = {"reply": str(replies[-1] if replies else "")[:MAX_SHOWN_CHARS]}
        shown |= replay_shown(ctx)
        result: dict[str, Any] = ctx.state[RESULT_KEY]
        if result.get("ok"):
            try:
                reward = scored_reward(result)
            except VerifiersRewardFailed as exc:  # no finite score
                failure: InfraError = exc
            else:
                reward.info = {**shown, **reward.info}
                return reward
        else:
            failure = _failure(result)
        reason = (
            "reward_failed_on_answer"
            if isinstance(failure, VerifiersRewardFailed)
            else "environment_failed_on_answer"
        )
        python, spec, max_turns = ctx.state[PYTHON_KEY], job.environment, ctx.limits.max_turns

        async def control() -> ControlResult:
            return await control_rollout(python, spec, job.row, max_turns)

        key = content_key(self.name, spec.model_dump(mode="json"), job.row, max_turns)
        return blamed(failure, reason, await CONTROLS.result(key, control), shown)


async def control_rollout(
    python: Path, spec: LegacyEnvironmentSpec, row: dict[str, Any], max_turns: int
) -> ControlResult:
    """The same row played with an empty reply to every turn, ended at the same turn limit,
    then scored."""
    # Its turns are answered here, as the policy's are: see `empty_replies`.
    request = {
        "op": "legacy_rollout",
        "environment": spec.loaded(),
        "row": row,
    }
    try:
        reply = await _ask(python, request, spec.score_timeout_s, empty_replies(max_turns), True)
    except (VerifiersWorkerFailure, InfraError) as exc:  # says nothing lasting: asked again
        return ControlResult(False, f"with empty replies: {exc}", keep=False)
    if not reply.get("ok"):
        return ControlResult(False, f"with empty replies: {_failure(reply)}")
    try:
        got = scored_reward(reply)
    except VerifiersRewardFailed as exc:
        return ControlResult(False, f"with empty replies: {exc}")
    return ControlResult(True, f"empty replies play through and are scored: reward {got.value:g}")
