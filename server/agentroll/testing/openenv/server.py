"""openenv-core's environment server as a process a test owns.

openenv-core pulls in fastmcp, websockets and (for its web UI) gradio, none of which the
server's environment holds, so its server runs in a virtual environment of its own, created by
code from `openenv.lock.txt` and cached beside the engine's (`ensure_venv`). `guess_server()`
starts `uvicorn guess_env:app` there on a free loopback port, in its own session, waits for
`/health`, and kills its process group on exit (or `kill()` earlier, to drop every session at
once).
"""

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx

from agentroll.server.engine.environment import LockedVenv, cache_root, ensure_venv
from agentroll.server.engine.vllm_server import free_port

HERE = Path(__file__).parent
START_TIMEOUT_S = 120.0


def openenv_venv() -> LockedVenv:
    lock = resources.files(__package__).joinpath("openenv.lock.txt").read_text()
    return LockedVenv("openenv-test", lock, "openenv.core.env_server")


async def openenv_python(timeout_s: float = 1200.0) -> Path:
    """The interpreter of the openenv environment, installed if it is not cached yet."""
    venv = await ensure_venv(openenv_venv(), cache_root(), timeout_s=timeout_s)
    return venv.python


@dataclass
class GuessServer:
    url: str
    process: asyncio.subprocess.Process

    def kill(self) -> None:
        """Kill the server now: every open session's WebSocket drops."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def guess_server() -> AsyncIterator[GuessServer]:
    python = await openenv_python()
    port = free_port()
    argv = [str(python), "-I", "-m", "uvicorn", "guess_env:app", "--app-dir", str(HERE)]
    process = await asyncio.create_subprocess_exec(
        *argv,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        start_new_session=True,
    )
    server = GuessServer(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"the OpenEnv server exited ({process.returncode})")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{server.url}/health")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the OpenEnv server did not answer /health in time")
                await asyncio.sleep(0.2)
        yield server
    finally:
        server.kill()
        await asyncio.wait_for(process.wait(), 30)
