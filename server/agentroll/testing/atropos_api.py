"""atroposlib's own trajectory API server (`run-api`), started for a test and owned by it.

atroposlib pulls in what its environments need (transformers, datasets, wandb, ...), which
the API server never imports: its environment is a cached virtual environment of its own
(`atropos_api.lock.txt`, installed `--no-deps` by `ensure_venv`, like the engine's), so
nothing is added to agentroll's. The server runs in a process group of its own on a free
loopback port and is stopped, group and all, when the context ends.
"""

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

import httpx

from agentroll.server.engine.environment import LockedVenv, cache_root, ensure_venv
from agentroll.server.engine.vllm_server import free_port

LOCK_FILE = "atropos_api.lock.txt"
INSTALL_TIMEOUT_S = 600.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def atropos_venv() -> LockedVenv:
    lock = resources.files("agentroll.testing").joinpath(LOCK_FILE).read_text()
    return LockedVenv("atropos-api", lock, "atroposlib.api.server")


async def _until_up(url: str, process: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"run-api exited {process.returncode}: see {log}")
            try:
                if (await http.get("/")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"run-api did not answer within {START_TIMEOUT_S:.0f} s (log: {log})")


async def _stop(process: asyncio.subprocess.Process) -> None:
    """The server's whole process group: SIGTERM, then SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # the group ended between the check and the signal
            return
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            continue


@asynccontextmanager
async def atropos_api(log_dir: Path) -> AsyncIterator[str]:
    """The URL of a fresh Atropos API (its state starts empty); its output in `log_dir`."""
    venv = await ensure_venv(atropos_venv(), cache_root(), timeout_s=INSTALL_TIMEOUT_S)
    port = free_port()
    log = log_dir / "atropos-api.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(venv.root / "bin" / "run-api"),
            *("--host", "127.0.0.1", "--port", str(port)),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        await _until_up(url, process, log)
        yield url
    finally:
        await _stop(process)
