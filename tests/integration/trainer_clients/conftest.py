"""In-process agentroll servers (real sockets) running the steerable handler."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.integration.trainer_clients.handlers import registry

from agentroll.server.api import create_app
from agentroll.server.schema import PoolSizes
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.server.settings import Settings
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app

Servers = Callable[..., AbstractAsyncContextManager[list[RunningServer]]]


@pytest.fixture
def servers(tmp_path: Path) -> Servers:
    """`async with servers(count, **settings) as [server, ...]` (each with its own store)."""

    @asynccontextmanager
    async def start(count: int = 1, **settings: Any) -> AsyncIterator[list[RunningServer]]:
        async with AsyncExitStack() as stack:
            running = []
            for i in range(count):
                config = Settings(
                    db_path=tmp_path / f"server{i}.db",
                    pools=PoolSizes(init=16, run=32, eval=16, ready_buffer=32),
                    shutdown_grace_s=0.5,
                    **settings,
                )
                server = await start_in_loop(create_app(config, registry=registry()))
                stack.push_async_callback(server.stop)
                running.append(server)
            yield running

    return start


@pytest.fixture
async def scripted_llm() -> AsyncIterator[RunningServer]:
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(policy=["echo"], seed=5)))
    yield server
    await server.stop()
