"""Shared fixtures: an agentroll server (and scripted backend) on real loopback sockets."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.server.admission import AdmissionSettings
from agentroll.server.api import create_app
from agentroll.server.schema import PoolSizes
from agentroll.server.schema.auth import TOKEN_FILE_ENV
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.server.settings import Settings
from agentroll.trainer_clients import AsyncRolloutClient

ServerFactory = Callable[..., AbstractAsyncContextManager[tuple[RunningServer, AsyncRolloutClient]]]


@pytest.fixture(autouse=True)
def server_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where every server a test starts keeps the token it generates, and where the test's
    clients read it: `AGENTROLL_TOKEN_FILE`, as an operator would export it for both."""
    path = tmp_path / "api-token"
    monkeypatch.setenv(TOKEN_FILE_ENV, str(path))
    return path


@pytest.fixture
def agentroll_server(tmp_path: Path) -> ServerFactory:
    """`async with agentroll_server(registry=..., pools=..., **settings) as (server, client)`."""

    @asynccontextmanager
    async def start(
        registry: HandlerRegistry | None = None,
        pools: dict[str, int] | None = None,
        **settings: Any,
    ) -> AsyncIterator[tuple[RunningServer, AsyncRolloutClient]]:
        # Admission reads the node's CPU pressure: beside other work it would hold these
        # tests' jobs at its floor. Tests of admission pass their own settings.
        settings.setdefault("admission", AdmissionSettings(enabled=False))
        config = Settings(
            db_path=tmp_path / "agentroll.db",
            pools=PoolSizes(**(pools or {})),
            shutdown_grace_s=0.5,
            **settings,
        )
        server = await start_in_loop(create_app(config, registry=registry))
        client = AsyncRolloutClient(server.url, token=server.token)
        try:
            yield server, client
        finally:
            await client.close()
            await server.stop()

    return start
