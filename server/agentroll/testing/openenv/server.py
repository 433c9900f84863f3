"""openenv-core's environment server as a process a test owns.

openenv-core pulls in fastmcp, websockets and (for its web UI) gradio, none of which the
server's environment holds, so its server runs in a virtual environment of its own, created by
code from `openenv.lock.txt` and cached beside the engine's (`ensure_venv`). `guess_server()`
serves `guess_env:app` from there (`agentroll.testing.uvicorn_app`), `guess_mcp_server()`
`guess_mcp_env:app`.
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from agentroll.testing.uvicorn_app import AppServer, locked_python, served_app

HERE = Path(__file__).parent
GuessServer = AppServer


async def openenv_python(timeout_s: float = 1200.0) -> Path:
    """The interpreter of the openenv environment, installed if it is not cached yet."""
    return await locked_python(HERE, "openenv", "openenv.core.env_server", timeout_s)


@contextlib.asynccontextmanager
async def guess_server() -> AsyncIterator[AppServer]:
    async with served_app(await openenv_python(), "guess_env:app", HERE) as server:
        yield server


@contextlib.asynccontextmanager
async def guess_mcp_server() -> AsyncIterator[AppServer]:
    """The guessing game as an MCP environment (`guess_mcp_env`): its tool is `guess`."""
    async with served_app(await openenv_python(), "guess_mcp_env:app", HERE) as server:
        yield server
