"""An open Open Reward Standard session is kept alive: `POST /ping` with its session id at the
SDK's cadence while the policy thinks, none once it is closed, and a failing ping ends
nothing (the episode's next real request tells). The server here only records what reaches
it; that a real openreward server answers `/ping` so is checked by the integration tests."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from agentroll.handlers.builtin.openreward import wire
from agentroll.handlers.builtin.openreward.wire import OpenRewardSession

INTERVAL_S = 0.05


class Recorder:
    def __init__(self, ping_status: int) -> None:
        self.ping_status = ping_status
        self.pings: list[str] = []
        self.deleted: list[str] = []

    async def create_session(self, request: web.Request) -> web.Response:
        return web.Response(text="event: task_id\r\ndata: sid-1\r\n\r\n")

    async def create(self, request: web.Request) -> web.Response:
        return web.json_response({"sid": request.headers["X-Session-ID"]})

    async def ping(self, request: web.Request) -> web.Response:
        self.pings.append(request.headers.get("X-Session-ID", ""))
        return web.Response(status=self.ping_status)

    async def delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.path)
        return web.json_response({})


@contextlib.asynccontextmanager
async def served(recorder: Recorder) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/create_session", recorder.create_session)
    app.router.add_post("/create", recorder.create)
    app.router.add_post("/ping", recorder.ping)
    app.router.add_post("/delete", recorder.delete)
    app.router.add_post("/delete_session", recorder.delete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def pinged_session(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "PING_INTERVAL_S", INTERVAL_S)
    async with served(recorder) as url, aiohttp.ClientSession() as http:
        session = OpenRewardSession(http, url, "game", timeout_s=5)
        await session.open({"task_spec": {}})
        async with asyncio.timeout(30):
            while len(recorder.pings) < 3:  # a long policy turn
                await asyncio.sleep(INTERVAL_S)
        await session.close()
        after_close = len(recorder.pings)
        await asyncio.sleep(INTERVAL_S * 4)
        assert len(recorder.pings) == after_close  # no ping outlives the session
        assert recorder.deleted == ["/delete", "/delete_session"]


async def test_an_open_session_is_pinged_with_its_id_until_it_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(ping_status=200)
    await pinged_session(recorder, monkeypatch)
    assert set(recorder.pings) == {"sid-1"}


async def test_failing_pings_end_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(ping_status=503)  # an InfraError for any other request
    await pinged_session(recorder, monkeypatch)
    assert len(recorder.pings) >= 3  # it kept pinging, and closing still tore the session down


async def test_a_session_never_opened_closes_without_pinging() -> None:
    async with aiohttp.ClientSession() as http:
        session = OpenRewardSession(http, "http://127.0.0.1:9", "game", timeout_s=1)
        await session.close()
    assert session.keepalive is None
