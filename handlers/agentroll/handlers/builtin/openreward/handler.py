"""`openreward`: an episode of an Open Reward Standard environment, one session per job.

Task instance:

    {"server": {"url": "http://env-host:8080", "timeout_s": 60},
     "environment": "guessgame",             # optional: the server's first environment
     "task_spec": {"target": 7},             # the task, or "split": "train", "index": 3
     "prompt": "...",                        # optional: said before the environment's prompt
     "agent": {"max_turns": 20, ...}}        # optional: AgentConfig overrides

RUN opens one session (`/create_session`, `/create`), shows the policy the environment's prompt
and offers the environment's tools as its own (their input schemas as the arguments); each call
is one `/call`, and the blocks the environment answers are the tool's answer. An environment
with a terminal tool (a `@terminal` tool, hidden from the list) gets the policy's last plain
reply as its argument when the policy stops without the episode finished. The episode ends when
a tool answers `finished` (or the policy stops, or a limit of the agent loop is reached); the
session is deleted (`/delete`) on every path. The reward is the sum of the rewards the
environment emitted (absent counts as 0), each call's in `reward_info["rewards"]`.

Whose fault a failure is:
- a tool the environment does not have, or arguments its input model refuses
  (`input_validation`): an error answer to that call, which the policy can correct; too many in
  a row end the rollout as `agent_error` (`invalid_tool_calls`), still scored;
- the episode finished with no reward, or a reward that is not a finite number (NaN arrives as
  `null`): blamed by a control (`agentroll.handlers.builtin.control`): a fresh session of the
  same task, the same tool called with an empty answer (each required argument its type's
  empty value, a number its `minimum`). The control answered with a usable reward: the policy's
  answer broke the grader, reward 0, `reward_failed_on_answer`. It fails too: `infra_error`
  `openreward_bad_reward`, naming both;
- a server that cannot be reached, drops the connection, answers 5xx or anything off the
  protocol, no answer within `timeout_s` to agentroll's own requests, a prompt or tool answer
  holding an image (a text rollout cannot show it): `infra_error` (`openreward_*`);
- a tool call (the terminal tool's too) that raised, got no answer within `timeout_s` or one
  over 16 MiB: what the policy asked can do that (input the tool chokes on, a slow command, a
  huge output), so the episode ends there and the same control decides. It passes: reward 0,
  `tool_failed_on_answer`; it fails too: `infra_error` with the call's cause.
A failure the control blames on the policy scores 0, or the rewards emitted before it where
their sum is lower: breaking a tool never scores above stopping.
"""

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from agentroll.handlers.agent import AgentLoop, Tool, ToolAgentHandler
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.control import (
    CONTROLS,
    ControlResult,
    blamed,
    content_key,
    empty_arguments,
)
from agentroll.handlers.builtin.openreward.wire import CallFailed, OpenRewardSession
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox
from agentroll.runtime.action.errors import ActionRequestError

INSTANCE_KEY, EPISODE_KEY = "openreward_task", "openreward_episode"
PROMPT_KEY, ENV_KEY = "openreward_prompt", "openreward_env"
SYSTEM_PROMPT = (
    "You work on a task in an environment through the tools it offers; the environment "
    "answers each call. When you reply without calling a tool, that reply is your answer."
)
# Refusals of the policy's call (the SDK's `ToolCallError` reasons); `name_collision` is not
# one: two tools of the environment share a name.
POLICY_REASONS = frozenset({"not_found", "input_validation", "bad_input_shape", "episode_finished"})
# Failures a control says nothing lasting with (the server was busy or away for a moment).
PASSING_CAUSES = frozenset(
    {"openreward_timeout", "openreward_unreachable", "openreward_connection_lost"}
)


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: AnyHttpUrl
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Per request, tool calls too.")


class OpenRewardInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: ServerSpec
    environment: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[\w.-]+$")
    task_spec: dict[str, Any] | None = None
    split: str | None = Field(None, min_length=1, max_length=256)
    index: int | None = Field(None, ge=0)
    prompt: str = Field("", max_length=100_000)
    agent: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_task(self) -> "OpenRewardInstance":
        by_index = self.split is not None and self.index is not None
        half_index = (self.split is None) != (self.index is None)
        if (self.task_spec is not None) == by_index or half_index:
            raise ValueError("give either task_spec, or both split and index")
        return self

    def create(self) -> dict[str, Any]:
        """What `/create` is sent besides the environment's name."""
        if self.task_spec is not None:
            return {"task_spec": self.task_spec}
        return {"split": self.split, "index": self.index}


def bad_reward(output: dict[str, Any]) -> bool:
    """A reward that is not a finite number, or none on the answer that finished the episode."""
    reward = output.get("reward")
    if reward is None:
        return bool(output.get("finished"))
    return (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
    )


def blocks_text(blocks: Any, where: str) -> str:
    """The text of an answer's blocks; an image (or anything else) cannot be shown."""
    if not isinstance(blocks, list):
        raise InfraError(f"{where}: blocks are not a list", cause="openreward_error")
    texts = []
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise InfraError(
                f"{where}: a {kind!r} block, which a text rollout cannot show",
                cause="openreward_unsupported",
            )
        texts.append(str(block.get("text", "")))
    return "\n\n".join(texts)


@dataclass
class Call:
    """One tool call the environment answered."""

    tool: str
    reward: Any
    finished: bool


@dataclass(frozen=True)
class Broken:
    """The first call whose answer a control must judge: the tool, its argument schema (for
    the control's empty answer), what went wrong and the reason if the policy's answer did it."""

    tool: str
    schema: dict[str, Any]
    failure: InfraError
    reason: str


@dataclass
class Episode:
    calls: list[Call] = field(default_factory=list)
    finished: bool = False
    invalid_calls: int = 0
    session: str = ""
    """The session's id on the server."""
    broken: Broken | None = None
    cut: bool = False
    """A call failed (`CallFailed`): the episode cannot go on."""

    @property
    def reward(self) -> float:
        """The sum of the finite rewards emitted (absent counts as 0)."""
        rewards = [c.reward for c in self.calls if c.reward is not None]
        return float(sum(r for r in rewards if not bad_reward({"reward": r})))


class EnvTool(Tool):
    """A tool of the environment: its calls go to `/call`. One subclass per tool name
    (`env_tool`): a tool's name is its class's."""

    description: ClassVar[str] = ""

    def __init__(self, session: OpenRewardSession, episode: Episode, schema: Any) -> None:
        self.parameters = schema if isinstance(schema, dict) else {"type": "object"}
        self.session = session
        self.episode = episode

    def episode_over(self) -> bool:
        return self.episode.finished or self.episode.cut

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        if self.episode_over():
            return "The episode is over."
        return (await self.answer(args))[:max_chars]

    async def answer(self, args: dict[str, Any]) -> str:
        try:
            answer = await self.session.call(self.name, args)
        except CallFailed as exc:
            # Perhaps the policy's doing: the episode ends here and a control decides (eval).
            self.broke(exc, "tool_failed_on_answer")
            self.episode.cut = True
            return f"The tool failed: {exc}"
        if not answer["ok"]:
            reason, error = answer.get("reason"), str(answer.get("error"))[:2000]
            if reason is not None and reason not in POLICY_REASONS:
                raise InfraError(f"{self.name}: {reason}: {error}", cause="openreward_error")
            self.episode.invalid_calls += 1
            raise ActionRequestError(error)
        output = answer.get("output")
        if not isinstance(output, dict):
            raise InfraError(f"{self.name}: an answer without output", cause="openreward_error")
        text = blocks_text(output.get("blocks"), self.name)
        finished = bool(output.get("finished"))
        self.episode.calls.append(Call(self.name, output.get("reward"), finished))
        if bad_reward(output):
            failure = InfraError(
                f"{self.name} answered reward {output.get('reward')!r} (finished: {finished})",
                cause="openreward_bad_reward",
            )
            self.broke(failure, "reward_failed_on_answer")
        self.episode.finished = finished
        return text

    def broke(self, failure: InfraError, reason: str) -> None:
        """Keep the episode's first failure for the control to judge."""
        if self.episode.broken is None:
            self.episode.broken = Broken(self.name, self.parameters, failure, reason)


def env_tool(spec: Any) -> type[EnvTool]:
    """The tool class for a tool the environment lists (`{name, description, ...}`)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise InfraError(f"a tool without a name: {spec!r:.300}", cause="openreward_error")

    class Listed(EnvTool):
        name = spec["name"]
        description = str(spec.get("description") or "")

    return Listed


async def control(
    task: OpenRewardInstance, env_name: str, tool: str, schema: dict[str, Any]
) -> ControlResult:
    """The same task in a fresh session, `tool` called with the empty answer."""
    url = str(task.server.url).rstrip("/")
    async with aiohttp.ClientSession(trust_env=False) as http:
        session = OpenRewardSession(http, url, env_name, task.server.timeout_s)
        try:
            await session.open(task.create())
            answer = await session.call(tool, empty_arguments(schema))
        except InfraError as exc:
            return ControlResult(False, f"{exc.cause}: {exc}", keep=exc.cause not in PASSING_CAUSES)
        finally:
            await session.close()
    output = answer.get("output")
    if not answer["ok"] or not isinstance(output, dict):
        return ControlResult(False, f"{tool} refused the empty answer: {answer.get('error')}")
    if bad_reward(output):
        return ControlResult(
            False, f"{tool} gave reward {output.get('reward')!r} to the empty answer too"
        )
    return ControlResult(True, f"{tool} gave the empty answer reward {output.get('reward')!r}")


async def environment_name(session: OpenRewardSession, task: OpenRewardInstance) -> str:
    """The instance's environment, else the server's first (its default)."""
    if task.environment is not None:
        return task.environment
    names = await session.json("GET", "/list_environments")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise InfraError(
            f"the server lists no environment: {names!r:.300}", cause="openreward_error"
        )
    return names[0]


class OpenRewardHandler(ToolAgentHandler):
    name = "openreward"
    instance_model = OpenRewardInstance
    system_prompt = SYSTEM_PROMPT
    default_tools = ()

    @staticmethod
    def task(ctx: RolloutContext) -> OpenRewardInstance:
        return parsed_instance(ctx, OpenRewardInstance, INSTANCE_KEY)

    async def init(self, ctx: RolloutContext) -> None:
        """Nothing of agentroll's runs: the environment is the server's."""

    async def run(self, ctx: RolloutContext) -> None:
        task = self.task(ctx)
        episode = ctx.state[EPISODE_KEY] = Episode()
        url = str(task.server.url).rstrip("/")
        async with aiohttp.ClientSession(trust_env=False) as http:
            session = OpenRewardSession(http, url, "", task.server.timeout_s)
            session.env_name = ctx.state[ENV_KEY] = await environment_name(session, task)
            try:
                await session.open(task.create())
                episode.session = session.sid
                ctx.state[PROMPT_KEY] = blocks_text(await session.prompt(), "the prompt")
                listed = await session.tools()
                tools = [
                    env_tool(s)(session, episode, s.get("input_schema")) for s in listed["tools"]
                ]
                config = self.agent_config(ctx)
                loop = AgentLoop(tools, config)
                run = await loop.run(ctx, self.first_messages(ctx, config))
                terminal = listed.get("terminal_tool")
                if run.ended == "stop" and not episode.finished and isinstance(terminal, dict):
                    await self.answer_terminal(session, episode, terminal, run.final_text)
            finally:
                await session.close()

    @staticmethod
    async def answer_terminal(
        session: OpenRewardSession, episode: Episode, spec: dict[str, Any], reply: str
    ) -> None:
        """The policy's last plain reply, given to the environment's terminal tool; a refusal
        of it is the environment's grade of that reply (no reward), never a turn to retry."""
        arg = spec.get("arg")
        schema = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
        tool = env_tool(spec)(session, episode, schema if isinstance(arg, str) else None)
        # Counted in invalid_calls; the episode stays unfinished.
        with contextlib.suppress(ActionRequestError):
            await tool.answer({arg: reply} if isinstance(arg, str) else {})

    def task_prompt(self, ctx: RolloutContext) -> str:
        prompt, extra = ctx.state.get(PROMPT_KEY, ""), self.task(ctx).prompt
        return f"{extra}\n\n{prompt}" if extra else prompt

    async def eval(self, ctx: RolloutContext) -> Reward:
        episode = ctx.state.get(EPISODE_KEY)
        if not isinstance(episode, Episode):
            raise InfraError("the episode never started", cause="openreward_error")
        info = {
            "finished": episode.finished,
            "calls": len(episode.calls),
            "rewards": [c.reward for c in episode.calls],
            "invalid_calls": episode.invalid_calls,
        }
        broken = episode.broken
        if broken is None:
            return Reward(episode.reward, info)
        task, env_name = self.task(ctx), str(ctx.state.get(ENV_KEY))
        key = content_key("openreward", str(task.server.url), env_name, task.create(), broken.tool)
        result = await CONTROLS.result(
            key, lambda: control(task, env_name, broken.tool, broken.schema)
        )
        verdict = blamed(broken.failure, broken.reason, result, info)
        # Never above stopping before the failed call: the penalties already earned stay.
        return Reward(min(verdict.value, episode.reward), verdict.info)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        episode = ctx.state.get(EPISODE_KEY)
        if isinstance(episode, Episode):
            calls = [
                {"tool": c.tool, "reward": c.reward, "finished": c.finished} for c in episode.calls
            ]
            record = {"session": episode.session, "calls": calls}
            out["metadata"] = {**out.get("metadata", {}), "openreward": record}
        return out
