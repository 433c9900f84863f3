"""Real action servers as subprocesses on temporary sockets, owned and cleaned up by the tests."""

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from action_servers import ServerProcess, start_server

from agentroll.runtime.action import ActionClient


@contextlib.contextmanager
def _running_server() -> Iterator[ServerProcess]:
    # Short base path: AF_UNIX socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="act-") as base:
        server = start_server(Path(base))
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ServerProcess]:
    """One server for a whole module: tests must not depend on each other's shell state."""
    with _running_server() as server:
        yield server


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that kill or stop it."""
    with _running_server() as server:
        yield server


@pytest.fixture
async def client(shared_server: ServerProcess) -> AsyncIterator[ActionClient]:
    client = ActionClient(shared_server.socket)
    await client.connect(20)
    try:
        yield client
    finally:
        await client.close()
