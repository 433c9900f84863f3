"""An ASGI app of another virtual environment, served by uvicorn as a process a test owns.

The environment servers of the protocols agentroll speaks (openenv-core's, openreward's) need
packages the server's own environment cannot hold, so tests run them from a virtual
environment of their own. `served_app()` starts `python -I -m uvicorn MODULE:app` on a free
loopback port, in its own session, waits for `/health`, and kills its process group on exit
(or `kill()` earlier, to drop every connection at once).
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from agentroll.server.engine.environment import LockedVenv, cache_root, ensure_venv
from agentroll.server.engine.vllm_server import free_port

START_TIMEOUT_S = 120.0


async def locked_python(folder: Path, name: str, probe: str, timeout_s: float = 1200.0) -> Path:
    """The interpreter of the virtual environment `folder/<name>.lock.txt` pins (`probe`: a
    module it must import), created by `ensure_venv` if it is not cached yet."""
    lock = (folder / f"{name}.lock.txt").read_text()
    venv = await ensure_venv(
        LockedVenv(f"{name}-test", lock, probe), cache_root(), timeout_s=timeout_s
    )
    return venv.python


@dataclass
class AppServer:
    url: str
    process: asyncio.subprocess.Process

    def kill(self) -> None:
        """Kill the server now: every open connection drops."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def served_app(python: Path, app: str, app_dir: Path) -> AsyncIterator[AppServer]:
    """`app` (`module:attribute`, the module in `app_dir`) served by `python`'s uvicorn."""
    port = free_port()
    argv = [str(python), "-I", "-m", "uvicorn", app, "--app-dir", str(app_dir)]
    process = await asyncio.create_subprocess_exec(
        *argv,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        # A line per request on stdout (openreward's structured log): nobody reads it.
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = AppServer(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"{app} exited ({process.returncode})")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{server.url}/health")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{app} did not answer /health in time")
                await asyncio.sleep(0.2)
        yield server
    finally:
        server.kill()
        await asyncio.wait_for(process.wait(), 30)
