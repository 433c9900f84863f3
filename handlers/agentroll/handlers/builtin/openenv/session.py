"""One OpenEnv session over the server's WebSocket (`/ws`), and the episode it plays.

Every frame is answered within `timeout_s`, a `step` within `timeout_s` plus the environment's
own bound on one tool call (`ENVIRONMENT_TOOL_BOUND_S`): its own timeout answer (a result the
policy's call earned) always arrives before agentroll gives up. A dropped WebSocket, no answer
in time or an answer of an unexpected type is `InfraError` (`openenv_connection_lost`,
`openenv_timeout`, `openenv_error`), as is a reward that is not a finite number
(`openenv_bad_reward`); for a `step`, no answer, a dropped WebSocket or an `EXECUTION_ERROR`
answer (the environment's step raised) is `StepFailed`, which the handler blames by a replayed
control (`replay.py`): the session records what it sent and what was answered (`exchanges`)
for that replay. A `step` answer over `MAX_FRAME_BYTES` is the policy's action's doing
(`AgentError`, `openenv_answer_too_large`): the episode ends, scored.
"""

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import WebSocketError, WSCloseCode

from agentroll.handlers.errors import AgentError, InfraError, StepFailed

MAX_FRAME_BYTES = 16 << 20
ENVIRONMENT_TOOL_BOUND_S = 30.0
"""openenv-core's own limit on one MCP tool call (`MCP_TOOL_CALL_TIMEOUT`), after which it
answers the step with a `timeout` error: the slowness is then the policy's (its call)."""


@dataclass
class Episode:
    """What the environment sent, in order (reset's answer first)."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    invalid_actions: int = 0
    blame: dict[str, Any] | None = None
    """Set when a failed step was blamed on the policy's action: the failure and the control."""

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


@dataclass(frozen=True)
class Exchange:
    """A `reset` or `step` frame's data, and the data of the observation that answered it."""

    kind: str
    data: dict[str, Any]
    answer: Any


class Session:
    """One environment session on `url`: frames out, one answer frame in, each within
    `timeout_s`; every `reset` and `step` answered with an observation kept in `exchanges`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, timeout_s: float, url: str) -> None:
        self.ws = ws
        self.timeout_s = timeout_s
        self.url = url
        self.exchanges: list[Exchange] = []
        # Strictly longer than the environment's bound, so its timeout answer comes first.
        self.step_wait_s = timeout_s + ENVIRONMENT_TOOL_BOUND_S

    async def ask(
        self,
        kind: str,
        data: dict[str, Any],
        answers: tuple[str, ...] = ("observation", "error"),
        within_s: float | None = None,
    ) -> dict[str, Any]:
        """The answer frame (of a type in `answers`) to one `reset` / `step` / `mcp` frame,
        awaited the frame's bound, or `within_s` where that is shorter."""
        wait_s = self.step_wait_s if kind == "step" else self.timeout_s
        # Never 0: aiohttp reads a timeout of 0 as none at all.
        wait_s = wait_s if within_s is None else max(0.01, min(wait_s, within_s))
        failed = self._failure(kind, data)
        try:
            await self.ws.send_str(json.dumps({"type": kind, "data": data}))
            message = await self.ws.receive(timeout=wait_s)
        except TimeoutError:
            raise failed(f"no answer to {kind} within {wait_s:g} s", "openenv_timeout") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise failed(f"{kind}: {exc}", "openenv_connection_lost") from exc
        if kind == "step" and too_big(message):
            # What the policy's action made the environment say (e.g. a tool printing 20 MB):
            # the policy's doing, scored with the rewards so far; the session is gone.
            raise AgentError(
                f"the environment's answer to this step exceeded {MAX_FRAME_BYTES >> 20} MiB; "
                "the episode is over",
                cause="openenv_answer_too_large",
            )
        if message.type != aiohttp.WSMsgType.TEXT:
            raise failed(
                f"the environment's WebSocket dropped during {kind} ({message.type.name})",
                "openenv_connection_lost",
            )
        try:
            answer = json.loads(message.data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("type") not in answers:
            raise InfraError(
                f"unexpected answer to {kind}: {message.data[:300]}", cause="openenv_error"
            )
        answered = answer.get("data")
        code = answered.get("code") if isinstance(answered, dict) else None
        if kind == "step" and answer["type"] == "error" and code == "EXECUTION_ERROR":
            # The environment's step raised.
            raise failed(f"step failed: {json.dumps(answered)[:1000]}", "openenv_error")
        if kind in ("reset", "step") and answer["type"] == "observation":
            self.exchanges.append(Exchange(kind, data, answered))
        return answer

    @staticmethod
    def _failure(kind: str, data: dict[str, Any]) -> Callable[[str, str], InfraError]:
        """How a frame's failure is raised: a step's as `StepFailed`, carrying its action (its
        failure may be the action's doing), any other frame's as `InfraError`."""

        def failure(message: str, cause: str) -> InfraError:
            if kind == "step":
                return StepFailed(message, data, cause=cause)
            return InfraError(message, cause=cause)

        return failure

    async def close(self) -> None:
        """`close`, then the server's own closing handshake (closing first ourselves would
        race the server's close), each within `timeout_s`."""
        # Already gone: nothing to release.
        with contextlib.suppress(aiohttp.ClientError, ConnectionError, TimeoutError):
            if not self.ws.closed:
                await self.ws.send_str(json.dumps({"type": "close"}))
                await self.ws.receive(timeout=self.timeout_s)
        await self.ws.close()


def too_big(message: aiohttp.WSMessage) -> bool:
    """A frame over `MAX_FRAME_BYTES` (aiohttp then closes the WebSocket)."""
    error = message.data if message.type == aiohttp.WSMsgType.ERROR else None
    return isinstance(error, WebSocketError) and error.code == WSCloseCode.MESSAGE_TOO_BIG


async def open_session(
    http: aiohttp.ClientSession,
    url: str,
    timeout_s: float,
    reset: dict[str, Any],
    episode: Episode,
) -> Session:
    """A session on `url`'s `/ws`, reset with `reset` (its first observation added to
    `episode`); closed again if the reset fails."""
    ws_url = "ws" + url.removeprefix("http") + "/ws"
    try:
        async with asyncio.timeout(timeout_s):
            ws = await http.ws_connect(ws_url, max_msg_size=MAX_FRAME_BYTES)
    except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
        raise InfraError(f"cannot open {ws_url}: {exc}", cause="openenv_connection_lost") from exc
    session = Session(ws, timeout_s, url)
    try:
        first = await session.ask("reset", reset)
        if first["type"] == "error":
            raise InfraError(
                f"reset failed: {json.dumps(first.get('data'))[:1000]}", cause="openenv_error"
            )
        episode.add(first["data"])
    except BaseException:
        await session.close()
        raise
    return session
