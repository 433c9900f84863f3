"""`verifiers`: a task of a verifiers environment (a v1 `Taskset` package), run unmodified.

Task instance (`verifiers_instances()` makes one per task of the taskset):

    {"environment": {"taskset": "my-env",            # the installed taskset package's id
                     "packages": ["my-env==0.2"],    # pip requirements that install it
                     "config": {...},                # the taskset's config fields, if any
                     "score_timeout_s": 60},
     "task": {"id": ..., "prompt": ..., ...}}        # the task's data, as the taskset made it

INIT installs (once, cached) the environment's virtual environment (`venv`). RUN prompts the
policy with the task's `system_prompt` and `prompt` (text, or chat messages) and takes its
reply; a task with tools (its `vf.Toolset`s, `tools`) runs under the tool loop instead, with
the toolsets' tools and no other, until the policy answers without a call (as verifiers' chat
harness ends), those of a toolset verifiers would serve in a box of its own in the rollout's
own sandbox (`sandbox_tools`), the others in the environment's worker; a taskset whose
package exports its own `vf.Env` plays that environment's episode, its code driving the
turns (`episodes`). EVAL rebuilds the task from its data in a verifiers worker (`workers`,
`worker.py`), hands its `@vf.reward` and `@vf.metric` functions the rollout as a verifiers
trace, and the reward is what verifiers itself would sum: every reward's score times its
weight.

Whose fault a failure is:
- the taskset cannot be imported, its config or the task's data does not validate, or the
  environment needs what agentroll does not run yet (tool servers shared across tasks or
  behind a URL, a hosted sandbox provider or a container image other than verifiers'
  default, a task that needs a container, more than one agent, LLM judges), or a sandboxed
  toolset does not set up in the rollout's sandbox:
  infra_error `verifiers_load_failed` (nothing of the policy's was read);
- a tool or the environment's own `run` fails on the policy's calls or replies: `tools`,
  `episodes`;
- a reward function raises, never returns (`score_timeout_s`), kills its worker, or gives no
  finite score, on the policy's reply (a timeout or a dead worker counts once it happened
  twice, the second time in a fresh worker: a loaded node is not the reply's doing): blamed
  by a control (`control.py`), the same task scored on an empty reply. If the control is
  scored, the reply broke the reward code: ok, reward 0, `reason: "reward_failed_on_answer"`.
  If it fails too, the environment is broken for everyone: infra_error
  `verifiers_reward_failed`;
- a worker that cannot start: infra_error `verifiers_worker_unavailable`.
"""

import math
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import (
    ANSWER_TOOLS,
    SUBMIT_ANSWER_PROMPT,
    AgentLoop,
    FinalAnswer,
    ToolAgentHandler,
)
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.control import CONTROLS, ControlResult, blamed, content_key
from agentroll.handlers.builtin.verifiers_env.episodes import (
    ENV_FAILED,
    control_episode,
    play_episode,
)
from agentroll.handlers.builtin.verifiers_env.replays import replay_shown
from agentroll.handlers.builtin.verifiers_env.sandbox_tools import (
    SandboxedTool,
    open_tool_sandbox,
)
from agentroll.handlers.builtin.verifiers_env.tools import VerifiersTool, describe
from agentroll.handlers.builtin.verifiers_env.venv import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import default_workers, load_failure
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError, VerifiersRewardFailed, VerifiersWorkerFailure
from agentroll.server.schema.messages import ChatMessage

INSTANCE_KEY, PYTHON_KEY, PROMPT_KEY = "verifiers_task", "verifiers_python", "verifiers_prompt"
TOOLS_KEY, TURNS_KEY, EPISODE_KEY = "verifiers_tools", "verifiers_turns", "verifiers_episode"
SANDBOXED_KEY = "verifiers_sandboxed"
MAX_SHOWN_CHARS = 2_000
MAX_REQUIREMENTS = 32
SCORING_ATTEMPTS = 2
"""A scoring that times out or kills its worker is tried once more in a fresh worker."""


class EnvironmentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    taskset: str = Field(..., min_length=1, max_length=200)
    packages: list[str] = Field(default_factory=list, max_length=MAX_REQUIREMENTS)
    config: dict[str, Any] = Field(default_factory=dict)
    score_timeout_s: float = Field(60.0, gt=0, le=3600)

    def taskset_config(self) -> dict[str, Any]:
        return {**self.config, "id": self.taskset}


class VerifiersInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: EnvironmentSpec
    task: dict[str, Any]


def prompt_messages(task: dict[str, Any]) -> list[ChatMessage]:
    """The opening messages a task's data describes (`system_prompt`, then `prompt`)."""
    messages: list[ChatMessage] = []
    if task.get("system_prompt"):
        messages.append({"role": "system", "content": str(task["system_prompt"])})
    prompt = task.get("prompt")
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    elif isinstance(prompt, list):
        messages.extend(cast(ChatMessage, dict(m)) for m in prompt)
    if not messages:
        raise ValueError("the task has no prompt")
    return messages


SCORED_FIELDS = ("tool_calls", "tool_call_id", "name")


def scored_message(message: ChatMessage) -> ChatMessage:
    """A message as the environment's rewards read it: its role and text, with the tool calls
    and tool answers of a task with tools."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    out.update({k: message[k] for k in SCORED_FIELDS if message.get(k)})  # type: ignore[literal-required]
    return cast(ChatMessage, out)


def scored_reward(reply: dict[str, Any]) -> Reward:
    """The reward a worker's reply gives; `VerifiersRewardFailed` where the reward code failed."""
    if not reply.get("ok"):
        if reply.get("stage") == "load":
            raise load_failure(reply)
        raise VerifiersRewardFailed(f"a reward function failed: {reply.get('error')}"[:4000])
    rewards: dict[str, Any] = reply["rewards"]
    unscored = [n for n, r in rewards.items() if r is None or not math.isfinite(r["score"])]
    if unscored:
        raise VerifiersRewardFailed(f"rewards {unscored} gave no finite score")
    total = sum(r["score"] * r["weight"] for r in rewards.values())
    info = {
        "rewards": {n: r["score"] for n, r in rewards.items()},
        "weights": {n: r["weight"] for n, r in rewards.items()},
        "metrics": reply.get("metrics", {}),
    }
    return Reward(float(total), info)


async def score_messages(
    python: Path,
    spec: EnvironmentSpec,
    task: dict[str, Any],
    messages: list[ChatMessage],
    first: int,
) -> Reward:
    """The environment's rewards on `messages`, the assistant replies from `first` on being
    the policy's. `VerifiersWorkerFailure` or `VerifiersRewardFailed` where no reward came."""
    sampled = [i for i, m in enumerate(messages) if i >= first and m["role"] == "assistant"]
    request = {
        "op": "score",
        "taskset": spec.taskset_config(),
        "task": task,
        "messages": messages,
        "sampled": sampled,
    }
    reply = await default_workers().ask(python, request, spec.score_timeout_s)
    return scored_reward(reply)


async def score_twice(
    python: Path,
    spec: EnvironmentSpec,
    task: dict[str, Any],
    messages: list[ChatMessage],
    first: int,
    shown: dict[str, Any],
) -> Reward:
    """`score_messages`, once more in a fresh worker when the first worker timed out or died
    (a starved or killed worker is not the reply's doing; a reply that does it does it twice;
    `shown["scoring_attempts"]` records the second try). `VerifiersRewardFailed` where the
    reward code failed, `VerifiersWorkerFailure` where no worker could start."""
    failure: VerifiersRewardFailed | None = None
    for attempt in range(1, SCORING_ATTEMPTS + 1):
        if attempt > 1:
            shown["scoring_attempts"] = attempt
        try:
            return await score_messages(python, spec, task, messages, first)
        except VerifiersWorkerFailure as exc:
            if exc.kind == "unavailable":
                raise
            failure = VerifiersRewardFailed(f"the reward code {exc.kind} on the reply: {exc}")
    assert failure is not None
    raise failure


class VerifiersHandler(ToolAgentHandler):
    name = "verifiers"
    instance_model = VerifiersInstance
    system_prompt = SUBMIT_ANSWER_PROMPT
    default_tools = ANSWER_TOOLS
    final_answer = FinalAnswer()

    @staticmethod
    def task(ctx: RolloutContext) -> VerifiersInstance:
        return parsed_instance(ctx, VerifiersInstance, INSTANCE_KEY)

    def validate_instance(self, instance: dict[str, Any]) -> None:
        super().validate_instance(instance)
        prompt_messages(instance["task"])

    async def init(self, ctx: RolloutContext) -> None:
        job = self.task(ctx)
        venv = await ensure_verifiers_venv(job.environment.packages)
        ctx.state[PYTHON_KEY] = venv.python
        taskset = job.environment.taskset_config()
        described = await describe(venv.python, taskset, job.task)
        ctx.state[TOOLS_KEY], ctx.state[TURNS_KEY] = described.tools, described.turns
        ctx.state[SANDBOXED_KEY] = described.sandboxed
        if described.sandboxed:
            await open_tool_sandbox(ctx, venv.python, taskset, job.task)

    async def run(self, ctx: RolloutContext) -> None:
        job, python = self.task(ctx), ctx.state[PYTHON_KEY]
        taskset = job.environment.taskset_config()
        if ctx.state.get(TURNS_KEY):  # the environment's own code drives the turns
            ctx.state[EPISODE_KEY] = await play_episode(
                ctx,
                python,
                taskset,
                job.task,
                self.plain_messages(ctx),
                job.environment.score_timeout_s,
            )
        elif ctx.state.get(TOOLS_KEY):
            sandboxed = set(ctx.state[SANDBOXED_KEY])
            tools = [
                (SandboxedTool if s["function"]["name"] in sandboxed else VerifiersTool)(
                    python, taskset, job.task, s
                )
                for s in ctx.state[TOOLS_KEY]
            ]
            await AgentLoop(tools, self.agent_config(ctx)).run(ctx, self.plain_messages(ctx))
        else:
            await super().run(ctx)

    def plain_messages(self, ctx: RolloutContext) -> list[ChatMessage]:
        messages = prompt_messages(self.task(ctx).task)
        ctx.state[PROMPT_KEY] = len(messages)  # what follows is the policy's
        return messages

    def task_prompt(self, ctx: RolloutContext) -> str:
        return str(prompt_messages(self.task(ctx).task)[-1]["content"])

    async def eval(self, ctx: RolloutContext) -> Reward:
        job = self.task(ctx)
        python = ctx.state[PYTHON_KEY]
        messages = [scored_message(m) for m in ctx.llm.messages]
        first = ctx.state.get(PROMPT_KEY, len(messages))
        shown: dict[str, Any] = {"reply": self.final_reply(ctx, messages)[:MAX_SHOWN_CHARS]}
        shown |= replay_shown(ctx)
        episode_failure = ctx.state.get(EPISODE_KEY)
        if episode_failure is not None:
            return await self.blame_episode(ctx, job, episode_failure, shown)
        try:
            reward = await score_twice(python, job.environment, job.task, messages, first, shown)
        except VerifiersWorkerFailure as exc:  # unavailable: never the reply's doing
            raise InfraError(str(exc), cause="verifiers_worker_unavailable") from exc
        except VerifiersRewardFailed as exc:
            failure = exc
        else:
            reward.info = {**shown, **reward.info}
            return reward

        async def control() -> ControlResult:
            empty: list[ChatMessage] = [*messages[:first], {"role": "assistant", "content": ""}]
            try:
                got = await score_twice(python, job.environment, job.task, empty, first, {})
            except (VerifiersWorkerFailure, VerifiersRewardFailed) as exc:
                # Not kept when the workers could not start or timed out: that says nothing
                # lasting about the reward code.
                keep = isinstance(exc, VerifiersRewardFailed) and "timeout" not in str(exc)
                return ControlResult(False, f"on an empty reply: {exc}", keep=keep)
            return ControlResult(True, f"an empty reply was scored: reward {got.value:g}")

        key = content_key(self.name, job.environment.model_dump(mode="json"), job.task)
        return blamed(
            failure, "reward_failed_on_answer", await CONTROLS.result(key, control), shown
        )

    def final_reply(self, ctx: RolloutContext, messages: list[ChatMessage]) -> str:
        # The conversation is graded, so only the default agent, whose turns it holds, runs
        # it (the tool loop where the task has tools, the environment's turns where it has).
        if ctx.state.get(TURNS_KEY):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            return str(replies[-1]) if replies else ""
        if ctx.state.get(TOOLS_KEY):
            return self.agent_run(ctx).final_text
        return self.default_agent(ctx).result(ctx).final_text

    async def blame_episode(
        self, ctx: RolloutContext, job: VerifiersInstance, failure: str, shown: dict[str, Any]
    ) -> Reward:
        """The environment's code failed during the episode: the policy's doing (reward 0)
        if the same episode completes with empty replies, else the environment's."""
        python, spec = ctx.state[PYTHON_KEY], job.environment
        max_turns = ctx.limits.max_turns

        async def control() -> ControlResult:
            return await control_episode(
                python, spec.taskset_config(), job.task, spec.score_timeout_s, max_turns
            )

        key = content_key(self.name, "episode", spec.model_dump(mode="json"), job.task, max_turns)
        result = await CONTROLS.result(key, control)
        error = InfraError(failure, cause=ENV_FAILED)
        return blamed(error, "environment_failed_on_answer", result, shown)
