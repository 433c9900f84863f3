"""openreward's environment server as a process a test owns.

openreward pulls in the SDKs of three model vendors, OpenTelemetry and gRPC, none of which the
server's environment holds, so its server runs in a virtual environment of its own, created
by code from `openreward.lock.txt` and cached beside the engine's (`ensure_venv`).
`openreward_server()` serves `guess_env:app` (its two environments, `guessgame` and `quiz`)
from there (`agentroll.testing.uvicorn_app`).
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from agentroll.testing.uvicorn_app import AppServer, locked_python, served_app

HERE = Path(__file__).parent


async def openreward_python(timeout_s: float = 1200.0) -> Path:
    """The interpreter of the openreward environment, installed if it is not cached yet."""
    return await locked_python(HERE, "openreward", "openreward.environments", timeout_s)


@contextlib.asynccontextmanager
async def openreward_server() -> AsyncIterator[AppServer]:
    async with served_app(await openreward_python(), "guess_env:app", HERE) as server:
        yield server
