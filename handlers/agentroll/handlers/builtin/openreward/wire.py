"""The Open Reward Standard's wire protocol, client side (as openreward 0.1.167's SDK and
environment server speak it).

- `POST /create_session`: an SSE stream; its `task_id` event names the session id (sid).
- `POST /create` (header `X-Session-ID: sid`, JSON `{env_name, task_spec}` or `{env_name,
  split, index}`): the server builds the environment for the session and starts its setup.
- `GET /{env}/prompt`: the task's prompt as blocks (`{"type": "text", "text": ...}` or an
  image); `503` with `X-Backend-State: starting` while the environment's setup runs.
- `GET /{env}/task_tools` (`/{env}/tools` on servers without it): `{tools: [{name,
  description, input_schema}], terminal_tool: {name, arg} | null}`.
- `POST /{env}/call` (`{name, input}`): an SSE stream of `task_id`, then `chunk`s and an `end`
  whose data, joined, are `RunToolOutput` JSON (`{ok: true, output: ToolOutput}` with
  `ToolOutput = {blocks, metadata, reward, finished}`, or `{ok: false, error, reason}`); an
  `error` event instead when the environment's tool raised.
- `POST /ping` (header `X-Session-ID`): keeps the session alive. The server reaps a session
  nothing has reached for a while (openreward's own server: 15 minutes; its hosted gateway
  sooner), so an open session is pinged every `PING_INTERVAL_S`, as the SDK does, and a long
  policy turn does not cost the episode.
- `POST /delete`, `POST /delete_session`: the environment is torn down.

Every request is bounded by `timeout_s` and its answer by `MAX_ANSWER_BYTES`. What goes wrong
on the wire is `InfraError` (`openreward_unreachable`, `openreward_connection_lost`,
`openreward_timeout`, `openreward_error`); of those, a request's answer past its bounds (too
slow, too big) or a tool that raised is `CallFailed`: on a tool call, what the policy asked can
cause it (a slow command, a huge output, input the tool chokes on), so the handler has a control
decide whose it is.
"""

import asyncio
import contextlib
import json
import re
import time
from typing import Any

import aiohttp

from agentroll.handlers.errors import CallFailed, InfraError

MAX_ANSWER_BYTES = 16 << 20
STARTING_RETRY_S = 0.5
PING_INTERVAL_S = 10.0  # the SDK's cadence
LINE_END = re.compile(r"\r\n|\r|\n")


def sse_events(body: str) -> list[tuple[str, str]]:
    """(event, data) of each event of an SSE body; comments (`: ping`) skipped, multi-line
    data joined by newlines, the event name `message` where none is given; an event counts
    once its blank line has come. Lines end at CR, LF or CRLF only (`str.splitlines` would
    also cut at U+2028 inside a JSON string)."""
    events: list[tuple[str, str]] = []
    event, data = "", list[str]()
    for line in LINE_END.split(body):
        if not line:
            if data or event:
                events.append((event or "message", "\n".join(data)))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    return events  # an event the stream cut off before its blank line is not one


class OpenRewardSession:
    """One session of an Open Reward Standard environment server."""

    def __init__(
        self, http: aiohttp.ClientSession, url: str, env_name: str, timeout_s: float
    ) -> None:
        self.http = http
        self.url = url
        self.env_name = env_name
        self.timeout_s = timeout_s
        self.sid = ""
        self.keepalive: asyncio.Task[None] | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        """(status, text) of one request, within `timeout_s`; 5xx and dropped connections
        raise `InfraError`, other statuses are the caller's to read."""
        headers = {"X-Session-ID": self.sid} if self.sid else {}
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self.http.request(
                    method, f"{self.url}{path}", json=body, headers=headers
                ) as response,
            ):
                status = response.status
                starting = response.headers.get("X-Backend-State") == "starting"
                received = bytearray()
                async for chunk in response.content.iter_any():
                    received += chunk
                    if len(received) > MAX_ANSWER_BYTES:
                        raise CallFailed(
                            f"{method} {path}: answer over 16 MiB", cause="openreward_error"
                        )
        except TimeoutError:
            raise CallFailed(
                f"{method} {path}: no answer within {self.timeout_s:g} s",
                cause="openreward_timeout",
            ) from None
        except aiohttp.ClientConnectorError as exc:
            raise InfraError(
                f"cannot reach {self.url}: {exc}", cause="openreward_unreachable"
            ) from exc
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise InfraError(
                f"{method} {path}: {exc!r}", cause="openreward_connection_lost"
            ) from exc
        text = received.decode(errors="replace")
        if status == 503 and starting:
            return status, "starting"
        if status >= 500:
            raise InfraError(
                f"{method} {path}: HTTP {status}: {text[:1000]}", cause="openreward_error"
            )
        return status, text

    async def answered(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        """`request`, asked again while the server says the environment is still starting
        (its setup runs), until `timeout_s` has passed."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            status, text = await self.request(method, path, body)
            if status == 503 and text == "starting" and time.monotonic() < deadline:
                await asyncio.sleep(STARTING_RETRY_S)
                continue
            return status, text

    @staticmethod
    def ok_text(method: str, path: str, status: int, text: str) -> str:
        """`text` of a 200 answer; any other status is the server refusing what agentroll
        sent, never the policy's doing: `openreward_error`."""
        if status != 200:
            raise InfraError(
                f"{method} {path}: HTTP {status}: {text[:1000]}", cause="openreward_error"
            )
        return text

    @staticmethod
    def parsed(method: str, path: str, status: int, text: str) -> Any:
        text = OpenRewardSession.ok_text(method, path, status, text)
        try:
            return json.loads(text)
        except ValueError:
            raise InfraError(
                f"{method} {path}: not JSON: {text[:300]}", cause="openreward_error"
            ) from None

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        return self.parsed(method, path, *await self.answered(method, path, body))

    async def events(self, path: str, body: Any = None) -> list[tuple[str, str]]:
        """The events of a `POST` answered over SSE."""
        status, text = await self.answered("POST", path, body)
        return sse_events(self.ok_text("POST", path, status, text))

    async def open(self, create: dict[str, Any]) -> None:
        """A new session (`/create_session`), its environment built for `create` (`/create`)."""
        for event, data in await self.events("/create_session", {}):
            if event == "task_id":
                self.sid = data.strip()
        if not self.sid:
            raise InfraError("/create_session named no session", cause="openreward_error")
        self.keepalive = asyncio.create_task(self.ping_while_open())
        await self.json("POST", "/create", {"env_name": self.env_name, **create})

    async def ping_while_open(self) -> None:
        """`/ping` every `PING_INTERVAL_S` until `close`. A ping that fails is not an error
        of its own: a session the server has lost fails the episode's next real request."""
        while True:
            await asyncio.sleep(PING_INTERVAL_S)
            with contextlib.suppress(InfraError):
                await self.request("POST", "/ping")

    async def prompt(self) -> list[dict[str, Any]]:
        blocks = await self.json("GET", f"/{self.env_name}/prompt")
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise InfraError(
                f"the prompt is not a list of blocks: {blocks!r:.300}", cause="openreward_error"
            )
        return blocks

    async def tools(self) -> dict[str, Any]:
        path = f"/{self.env_name}/task_tools"
        status, text = await self.request("GET", path)
        if status == 404:  # a server older than per-task tools: the environment's own list
            listed = await self.json("GET", f"/{self.env_name}/tools")
        else:
            listed = self.parsed("GET", path, status, text)
        if not isinstance(listed, dict) or not isinstance(listed.get("tools"), list):
            raise InfraError(f"unexpected tool list: {listed!r:.300}", cause="openreward_error")
        return listed

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The environment's `RunToolOutput` for one tool call: the `end` event's data, its
        `chunk`s before it joined; an `error` event is the environment's tool raising
        (`CallFailed`)."""
        path = f"/{self.env_name}/call"
        chunks: list[str] = []
        for event, data in await self.events(path, {"name": name, "input": arguments}):
            if event == "error":
                raise CallFailed(f"{name} raised: {data[:1000]}", cause="openreward_error")
            if event in ("chunk", "end"):
                chunks.append(data)
            if event == "end":
                break
        else:
            raise InfraError(f"{name}: the answer ended before its end", cause="openreward_error")
        text = "".join(chunks)
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
            raise InfraError(f"unexpected tool answer: {text[:300]}", cause="openreward_error")
        return answer

    async def close(self) -> None:
        """Tear the environment down (`/delete`, then `/delete_session`), each within
        `timeout_s`; a server already gone has nothing left to release."""
        if self.keepalive is not None:
            self.keepalive.cancel()
            await asyncio.wait([self.keepalive])  # a cancel of close itself still propagates
            self.keepalive = None
        if not self.sid:
            return
        for path in ("/delete", "/delete_session"):
            with contextlib.suppress(InfraError):
                await self.request("POST", path)
