"""`RunningServer.stop` is bounded: a server that will not exit is cancelled, and one that
outlives its cancellation too is an error naming it, not a caller waiting forever."""

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest
import uvicorn

from agentroll.server.serving import RunningServer, start_in_loop

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _app(on_shutdown: Callable[[], Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """An ASGI app that answers 200 and runs `on_shutdown` in its lifespan's shutdown."""

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await on_shutdown()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _nothing() -> None:
    return None


async def _hang() -> None:
    await asyncio.Event().wait()


class Stubborn:
    """A shutdown that swallows every cancellation until the test releases it."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def __call__(self) -> None:
        while not self.released.is_set():
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                continue


async def test_a_server_that_exits_stops_at_once() -> None:
    server = await start_in_loop(_app(_nothing))
    async with httpx.AsyncClient() as http:
        assert (await http.get(server.url)).status_code == 200
    began = time.monotonic()
    await server.stop()
    assert server.task.done() and not server.task.cancelled()
    assert time.monotonic() - began < 10


async def test_a_server_whose_shutdown_hangs_is_cancelled_after_the_timeout() -> None:
    server = await start_in_loop(_app(_hang))
    await server.stop(timeout_s=0.5)
    assert server.task.cancelled()


async def test_a_server_that_outlives_its_cancellation_is_an_error_not_a_hang() -> None:
    # uvicorn's own serve task honours its cancellation; this one stands for any serve
    # that swallows it (an app's code on the task's own path).
    stubborn = Stubborn()
    url = "http://127.0.0.1:9"
    app = uvicorn.Server(uvicorn.Config(_app(_nothing)))
    server = RunningServer(url, app, asyncio.create_task(stubborn()))
    try:
        async with asyncio.timeout(60):  # the old stop awaited the cancelled task forever
            with pytest.raises(TimeoutError, match=re.escape(url)):
                await server.stop(timeout_s=0.2, cancel_wait_s=0.5)
        assert not server.task.done()
    finally:
        stubborn.released.set()
        await asyncio.wait({server.task}, timeout=30)
    assert server.task.done()
