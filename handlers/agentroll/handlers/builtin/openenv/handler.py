"""`openenv`: an episode of an OpenEnv environment server, driven over its WebSocket protocol.

Task instance:

    {"server": {"url": "http://env-host:8000", "timeout_s": 30,
                "deterministic": false},  # the operator's word (replay.py)
     "reset": {"seed": 7, ...},          # keyword arguments of the environment's reset()
     "prompt": "...",                    # optional: what the policy is told before the first
                                         # observation
     "agent": {"max_turns": 20, ...}}    # optional: AgentConfig overrides

RUN opens one session (`/ws`: the server builds one environment for it), sends `reset` and
shows the policy the first observation; the policy acts through one tool, `step`, whose
arguments are the environment's action (its JSON schema from `GET /schema`, without the
`metadata` field); each call is one `step` frame, and its observation, reward and `done`
come back as the tool's answer. The episode ends when the environment says `done` (or the
policy stops, or a limit of the agent loop is reached); the session is closed (`close`) in
every case. The reward is the sum of the rewards the environment gave (`None` counts as 0);
every observation as the environment sent it is in `metadata.openenv.observations`.

Under a harness preset (`{"task": "openenv", "agent": {"type": "claude_code"}, ...}`) the
environment's MCP tools are the policy's instead: the session opens just before the harness
starts, its tools are served on the rollout proxy's `/mcp`, each `tools/call` is a `step`
with a `call_tool` action, and the session closes when the harness ends (mcp_tools.py).

Whose fault a failure is:
- an action the environment refuses as invalid (its action model does not validate it: the
  server answers `VALIDATION_ERROR`), or that does not fit the action schema: an error
  answer to that call, which the policy can correct; too many in a row end the rollout as
  `agent_error` (`invalid_tool_calls`), still scored;
- a `step` whose answer is over 16 MiB (a tool of the policy's printed that much): the
  policy's doing, `agent_error` (`openenv_answer_too_large`), scored with the rewards so far;
- a `step` is awaited `timeout_s` plus the environment's own 30 s bound on a tool call, so
  the environment's `timeout` answer (the policy's slow call) always arrives first;
- a `step` the environment gave no answer to (`EXECUTION_ERROR`: its step raised; none within
  that bound; the WebSocket dropped) may be the action's doing: the episode is replayed in a
  fresh session to a control action in its place (replay.py; under a harness too, once its
  run ended), within what is left of RUN's budget. The environment answers the replay as
  before and the control: the policy's, `agent_error` (`action_failed_environment`), scored
  with the rewards so far; the control fails too: `infra_error` with the step's cause,
  naming both; the replay differs or the failure does not recur: `openenv_unreplayable`
  (the policy's on a server declared `deterministic`); no verdict in time:
  `openenv_control_timeout`;
- a step still unanswered when the loop's time budget runs out (its wait is cut to it): the
  policy's budget, `agent_error` (`wall_time`);
- the WebSocket dropped or closed by the server, no answer within `timeout_s` to any other
  frame, any other error frame (a session that could not be made), a schema that cannot be
  read, a reward that is not a number: `infra_error` (`openenv_connection_lost`,
  `openenv_timeout`, `openenv_error`, `openenv_bad_reward`).
"""

import asyncio
import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from agentroll.handlers.agent import DEFAULT_LIMITS, AgentLoop, Tool, ToolAgentHandler
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.budget import run_budget
from agentroll.handlers.builtin.openenv.replay import blamed_tools, empty_action, judged
from agentroll.handlers.builtin.openenv.session import Episode, Session, open_session
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import AgentError, InfraError, StepFailed
from agentroll.handlers.mcp import ToolSource
from agentroll.runtime import Sandbox, SandboxSpec
from agentroll.runtime.action.errors import ActionRequestError

INSTANCE_KEY, EPISODE_KEY = "openenv_task", "openenv_episode"
INVALID = "VALIDATION_ERROR"
SYSTEM_PROMPT = (
    "You act in an environment through the `step` tool: each call takes one action, and the "
    "environment answers with its observation, the reward and whether the episode is done."
)


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: AnyHttpUrl
    timeout_s: float = Field(30.0, gt=0, le=3600, description="Per frame and per request.")
    deterministic: bool = False
    """The operator's word that the environment answers the same actions after the same
    `reset` the same way, in any session: a failed step's replay that answers differently, or
    a failure that does not recur on it, is then the policy's making (else nobody's:
    `infra_error` `openenv_unreplayable`)."""


class OpenEnvInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: ServerSpec
    reset: dict[str, Any] = Field(default_factory=dict)
    prompt: str = Field("", max_length=100_000)
    agent: dict[str, Any] | None = None
    image: str | None = Field(None, min_length=1, max_length=4096)
    """The sandbox image (a rootfs folder or .sif) a harness runs in: one that holds its CLI.
    None: the host's root, read-only. The tool loop starts no sandbox."""


class StepTool(Tool):
    """The environment's `step`, with its action schema as the arguments."""

    name = "step"
    description = "Take one action in the environment."

    def __init__(
        self,
        session: Session,
        episode: Episode,
        action_schema: dict[str, Any],
        tool_timeout_s: float,
    ) -> None:
        properties = dict(action_schema.get("properties", {}))
        properties.pop("metadata", None)
        required = [r for r in action_schema.get("required", []) if r in properties]
        self.parameters = {"type": "object", "properties": properties, "required": required}
        self.session = session
        self.episode = episode
        self.tool_timeout_s = tool_timeout_s

    def episode_over(self) -> bool:
        return self.episode.done

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        if self.episode.done:
            return "The episode is over."
        # The loop's budget, when it is what cuts the call short (`limit_s` under the
        # configured tool timeout), bounds the wait; else the step's own bound does.
        clipped = limit_s < min(self.tool_timeout_s, self.session.step_wait_s)
        try:
            answer = await self.session.ask("step", args, within_s=limit_s if clipped else None)
        except StepFailed as exc:
            if clipped and exc.cause == "openenv_timeout":
                # Its answer is still due: the session cannot take another frame.
                await self.session.ws.close()
                raise AgentError(
                    f"no answer to the step within the {limit_s:.1f} s left of the time budget",
                    cause="wall_time",
                    finish_reason="wall_time",
                ) from exc
            raise
        data = answer.get("data") or {}
        if answer["type"] == "error":
            if data.get("code") != INVALID:
                raise InfraError(f"step failed: {json.dumps(data)[:1000]}", cause="openenv_error")
            self.episode.invalid_actions += 1
            # The policy's action: an invalid call (counted by the loop), answered with why.
            errors = [e.get("msg", "") for e in data.get("errors", []) if isinstance(e, dict)]
            reasons = "; ".join(errors or [str(data.get("message"))])
            raise ActionRequestError(f"invalid action: {reasons}")
        self.episode.add(data)
        return json.dumps(data, ensure_ascii=False)[:max_chars]


async def action_schema(http: aiohttp.ClientSession, url: str, timeout_s: float) -> dict[str, Any]:
    try:
        async with asyncio.timeout(timeout_s), http.get(f"{url}/schema") as response:
            response.raise_for_status()
            schema = (await response.json())["action"]
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        raise InfraError(
            f"cannot read the environment's /schema: {exc!r}", cause="openenv_error"
        ) from exc
    if not isinstance(schema, dict):
        raise InfraError("the environment's action schema is not an object", cause="openenv_error")
    return schema


class OpenEnvHandler(ToolAgentHandler):
    name = "openenv"
    instance_model = OpenEnvInstance
    system_prompt = SYSTEM_PROMPT
    default_tools = ()
    serves_mcp_tools = True

    @staticmethod
    def task(ctx: RolloutContext) -> OpenEnvInstance:
        return parsed_instance(ctx, OpenEnvInstance, INSTANCE_KEY)

    async def init(self, ctx: RolloutContext) -> None:
        """Nothing of agentroll's runs: the environment is the server's."""

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        image = self.task(ctx).image
        return SandboxSpec(
            image=None if image is None else Path(image), limits=DEFAULT_LIMITS, label=ctx.job_id
        )

    async def run(self, ctx: RolloutContext) -> None:
        task = self.task(ctx)
        url = str(task.server.url).rstrip("/")
        timeout_s = task.server.timeout_s
        episode = ctx.state[EPISODE_KEY] = Episode()
        # aiohttp, not httpx, for /schema too: an httpx client costs ~14 ms of CPU to create.
        async with aiohttp.ClientSession(trust_env=False) as http:
            schema = await action_schema(http, url, timeout_s)
            session = await open_session(http, url, timeout_s, task.reset, episode)
            try:
                try:
                    config = self.agent_config(ctx)
                    tool = StepTool(session, episode, schema, config.tool_timeout_s)
                    await AgentLoop([tool], config).run(ctx, self.first_messages(ctx, config))
                finally:
                    await session.close()
            except StepFailed as failure:  # perhaps the action's doing: a replay decides
                # (only a step fails so: `tool` exists)
                control = empty_action(tool.parameters)
                deterministic = task.server.deterministic
                budget_s = run_budget(ctx)
                raise await judged(
                    failure, session, control, episode, budget_s, deterministic
                ) from failure

    def task_prompt(self, ctx: RolloutContext) -> str:
        episode = ctx.state.get(EPISODE_KEY)
        first_frame = episode.frames[0] if isinstance(episode, Episode) else None
        first = json.dumps(first_frame, ensure_ascii=False)
        prompt = self.task(ctx).prompt
        return (
            f"{prompt}\n\nFirst observation: {first}" if prompt else f"First observation: {first}"
        )

    def mcp_tools(self, ctx: RolloutContext) -> AbstractAsyncContextManager[ToolSource]:
        """Under a harness: the environment's MCP tools, one session for the harness's run,
        within the tool loop's step budget and invalid-call rule."""
        task = self.task(ctx)
        episode = ctx.state[EPISODE_KEY] = Episode()
        url = str(task.server.url).rstrip("/")
        config = self.agent_config(ctx)
        max_steps = min(config.max_turns or ctx.limits.max_turns, ctx.limits.max_turns)
        limits = (max_steps, config.max_consecutive_errors)
        return blamed_tools(
            url,
            task.server.timeout_s,
            task.reset,
            episode,
            limits,
            budget_s=lambda: run_budget(ctx),
            deterministic=task.server.deterministic,
        )

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        """The environment's rewards, under any agent (what the policy said is not graded)."""
        episode = ctx.state.get(EPISODE_KEY)
        if not isinstance(episode, Episode):
            raise InfraError("the episode never started", cause="openenv_error")
        steps = len(episode.frames) - 1
        info = {
            "done": episode.done,
            "steps": steps,
            "step_rewards": [f.get("reward") for f in episode.frames],
            "invalid_actions": episode.invalid_actions,
            **(episode.blame or {}),
        }
        # A step the policy's action failed adds nothing: the rewards before it, penalties kept.
        return Reward(episode.reward, info)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        episode = ctx.state.get(EPISODE_KEY)
        if isinstance(episode, Episode):
            metadata = {**out.get("metadata", {}), "openenv": {"observations": episode.frames}}
            out["metadata"] = metadata
        return out
