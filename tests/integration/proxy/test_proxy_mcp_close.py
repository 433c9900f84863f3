"""The proxy's `/mcp` when it closes: a task's tool call still being answered (the task may
already have applied it, e.g. an environment's step and its reward) is finished and recorded,
not cancelled with its connection; one that never ends is cancelled after the bound."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.proxy.proxy_support import client_for, rig

from agentroll.server.proxy import rollout

pytestmark = pytest.mark.integration

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "step"}}


async def test_close_finishes_an_mcp_answer_in_flight_after_its_connection_is_gone(
    tmp_path: Path,
) -> None:
    started, applied = asyncio.Event(), asyncio.Event()
    recorded: list[Any] = []

    async def answer(message: Any) -> dict[str, Any]:
        started.set()
        await applied.wait()  # the environment still applying the step
        recorded.append(message["id"])
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}

    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        proxy.serve_mcp(answer)
        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(started.wait(), 30)
            closing = asyncio.create_task(proxy.close())
            # The harness's connection is closed under its call ...
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(call, 30)
            assert not closing.done()  # ... and the close waits for the answer.
            applied.set()
            await asyncio.wait_for(closing, 30)
    assert recorded == [1]
    assert not proxy.listening


async def test_close_cancels_an_mcp_answer_that_outlives_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout, "MCP_DRAIN_S", 0.2)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def answer(message: Any) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        proxy.serve_mcp(answer)
        async with client_for(proxy) as http:
            call = asyncio.create_task(http.post("http://rollout/mcp", json=CALL))
            await asyncio.wait_for(started.wait(), 30)
            await asyncio.wait_for(proxy.close(), 30)
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(call, 30)
    assert cancelled.is_set()
