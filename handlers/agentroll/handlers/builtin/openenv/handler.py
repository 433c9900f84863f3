"""`openenv`: an episode of an OpenEnv environment server, driven over its WebSocket protocol.

Task instance:

    {"server": {"url": "http://env-host:8000", "timeout_s": 30},
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

Whose fault a failure is:
- an action the environment refuses as invalid (its action model does not validate it: the
  server answers `VALIDATION_ERROR`), or that does not fit the action schema: an error
  answer to that call, which the policy can correct; too many in a row end the rollout as
  `agent_error` (`invalid_tool_calls`), still scored;
- the WebSocket dropped or closed by the server, no answer within `timeout_s`, any other error
  frame (`EXECUTION_ERROR`: the environment's step raised; a session that could not be
  made), a schema that cannot be read, a reward that is not a number: `infra_error`
  (`openenv_connection_lost`, `openenv_timeout`, `openenv_error`, `openenv_bad_reward`).
"""

import asyncio
import contextlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from agentroll.handlers.agent import AgentLoop, Tool, ToolAgentHandler
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox
from agentroll.runtime.action.errors import ActionRequestError

INSTANCE_KEY, EPISODE_KEY = "openenv_task", "openenv_episode"
MAX_FRAME_BYTES = 16 << 20
INVALID = "VALIDATION_ERROR"
SYSTEM_PROMPT = (
    "You act in an environment through the `step` tool: each call takes one action, and the "
    "environment answers with its observation, the reward and whether the episode is done."
)


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: AnyHttpUrl
    timeout_s: float = Field(30.0, gt=0, le=3600, description="Per frame and per request.")


class OpenEnvInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: ServerSpec
    reset: dict[str, Any] = Field(default_factory=dict)
    prompt: str = Field("", max_length=100_000)
    agent: dict[str, Any] | None = None


@dataclass
class Episode:
    """What the environment sent, in order (reset's answer first)."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    invalid_actions: int = 0

    def add(self, frame: dict[str, Any]) -> None:
        reward = frame.get("reward")
        if reward is not None and (
            not isinstance(reward, int | float) or not math.isfinite(float(reward))
        ):
            raise InfraError(
                f"the environment gave reward {reward!r:.100}", cause="openenv_bad_reward"
            )
        self.frames.append(frame)
        self.done = bool(frame.get("done"))

    @property
    def reward(self) -> float:
        return float(sum(float(f.get("reward") or 0.0) for f in self.frames))


class Session:
    """One environment session: frames out, one answer frame in, each within `timeout_s`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, timeout_s: float) -> None:
        self.ws = ws
        self.timeout_s = timeout_s

    async def ask(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """The answer frame (`observation` or `error`) to one `reset` / `step` frame."""
        try:
            await self.ws.send_str(json.dumps({"type": kind, "data": data}))
            message = await self.ws.receive(timeout=self.timeout_s)
        except TimeoutError:
            raise InfraError(
                f"no answer to {kind} within {self.timeout_s:g} s", cause="openenv_timeout"
            ) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise InfraError(f"{kind}: {exc}", cause="openenv_connection_lost") from exc
        if message.type != aiohttp.WSMsgType.TEXT:
            raise InfraError(
                f"the environment's WebSocket dropped during {kind} ({message.type.name})",
                cause="openenv_connection_lost",
            )
        try:
            answer = json.loads(message.data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("type") not in ("observation", "error"):
            raise InfraError(
                f"unexpected answer to {kind}: {message.data[:300]}", cause="openenv_error"
            )
        return answer

    async def close(self) -> None:
        """`close`, then the server's own closing handshake (closing first ourselves would
        race the server's close), each within `timeout_s`."""
        # Already gone: nothing to release.
        with contextlib.suppress(aiohttp.ClientError, ConnectionError, TimeoutError):
            if not self.ws.closed:
                await self.ws.send_str(json.dumps({"type": "close"}))
                await self.ws.receive(timeout=self.timeout_s)
        await self.ws.close()


class StepTool(Tool):
    """The environment's `step`, with its action schema as the arguments."""

    name = "step"
    description = "Take one action in the environment."

    def __init__(self, session: Session, episode: Episode, action_schema: dict[str, Any]) -> None:
        properties = dict(action_schema.get("properties", {}))
        properties.pop("metadata", None)
        required = [r for r in action_schema.get("required", []) if r in properties]
        self.parameters = {"type": "object", "properties": properties, "required": required}
        self.session = session
        self.episode = episode

    def episode_over(self) -> bool:
        return self.episode.done

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        if self.episode.done:
            return "The episode is over."
        answer = await self.session.ask("step", args)
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

    @staticmethod
    def task(ctx: RolloutContext) -> OpenEnvInstance:
        return parsed_instance(ctx, OpenEnvInstance, INSTANCE_KEY)

    async def init(self, ctx: RolloutContext) -> None:
        """Nothing of agentroll's runs: the environment is the server's."""

    async def run(self, ctx: RolloutContext) -> None:
        task = self.task(ctx)
        url = str(task.server.url).rstrip("/")
        timeout_s = task.server.timeout_s
        episode = ctx.state[EPISODE_KEY] = Episode()
        ws_url = "ws" + url.removeprefix("http") + "/ws"
        # aiohttp, not httpx, for /schema too: an httpx client costs ~14 ms of CPU to create.
        async with aiohttp.ClientSession(trust_env=False) as http:
            schema = await action_schema(http, url, timeout_s)
            try:
                async with asyncio.timeout(timeout_s):
                    ws = await http.ws_connect(ws_url, max_msg_size=MAX_FRAME_BYTES)
            except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                raise InfraError(
                    f"cannot open {ws_url}: {exc}", cause="openenv_connection_lost"
                ) from exc
            session = Session(ws, timeout_s)
            try:
                first = await session.ask("reset", task.reset)
                if first["type"] == "error":
                    raise InfraError(
                        f"reset failed: {json.dumps(first.get('data'))[:1000]}",
                        cause="openenv_error",
                    )
                episode.add(first["data"])
                ctx.state["openenv_first"] = first["data"]
                tool = StepTool(session, episode, schema)
                config = self.agent_config(ctx)
                await AgentLoop([tool], config).run(ctx, self.first_messages(ctx, config))
            finally:
                await session.close()

    def task_prompt(self, ctx: RolloutContext) -> str:
        first = json.dumps(ctx.state.get("openenv_first"), ensure_ascii=False)
        prompt = self.task(ctx).prompt
        return (
            f"{prompt}\n\nFirst observation: {first}" if prompt else f"First observation: {first}"
        )

    async def eval(self, ctx: RolloutContext) -> Reward:
        episode = ctx.state.get(EPISODE_KEY)
        if not isinstance(episode, Episode):
            raise InfraError("the episode never started", cause="openenv_error")
        steps = len(episode.frames) - 1
        info = {
            "done": episode.done,
            "steps": steps,
            "step_rewards": [f.get("reward") for f in episode.frames],
            "invalid_actions": episode.invalid_actions,
        }
        return Reward(episode.reward, info)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        episode = ctx.state.get(EPISODE_KEY)
        if isinstance(episode, Episode):
            metadata = {**out.get("metadata", {}), "openenv": {"observations": episode.frames}}
            out["metadata"] = metadata
        return out
