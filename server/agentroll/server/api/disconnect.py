"""Long-polls that end when their client goes away, instead of when their wait expires."""

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from agentroll.server.errors import ClientGone

T = TypeVar("T")


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise `ClientGone`."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.create_task(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task.cancelled() or not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone
    return task.result()
