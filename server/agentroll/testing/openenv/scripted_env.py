"""An OpenEnv session endpoint (`/ws`) in the test's own process, whose `step` answers are
scripted: for what openenv-core's own server never sends (a malformed answer) or sends only
after its own 30 s bound on a tool call (a slow answer). `reset` is answered with an empty
first observation (`on_reset` told first), `close` by closing; every other frame goes to the
script."""

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

StepScript = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""One frame the client sent (`{"type": "step", "data": ...}`) in, the answer frame out."""

FIRST_OBSERVATION: dict[str, Any] = {"observation": {}, "reward": None, "done": False}


@contextlib.asynccontextmanager
async def scripted_env(
    script: StepScript, on_reset: Callable[[], None] | None = None
) -> AsyncIterator[str]:
    """The server's base URL (`http://127.0.0.1:PORT`) while the context is open;
    `on_reset()` is called at each `reset` (a script that keeps a session's history)."""

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                break
            frame = json.loads(message.data)
            if frame.get("type") == "close":
                break
            if frame.get("type") == "reset":
                if on_reset is not None:
                    on_reset()
                answer = {"type": "observation", "data": FIRST_OBSERVATION}
            else:
                answer = await script(frame)
            if ws.closed:  # the client gave up waiting
                break
            await ws.send_str(json.dumps(answer))
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/ws", session)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
