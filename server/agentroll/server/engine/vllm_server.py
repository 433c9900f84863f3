"""A vLLM OpenAI server process on the CPU, owned by whoever started it.

    with VLLMServer(python, model_dir, log_path) as engine:        # tests' session fixture
        ... engine.url ...
    async with VLLMServer(python, model_dir, log_path) as engine:  # the demo, benchmarks

A `tokenizer/` folder inside the model folder, if there is one, is its tokenizer
(`TOKENIZER_DIR`). It runs in its own session (process group) on a free loopback port, with
vLLM's dev-mode routes (`/pause`, weight updates) on; it is ready once `/health` answers, and
on exit its whole group gets SIGTERM, then SIGKILL if it outlives the grace period. Never
found or stopped by name.
"""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from agentroll.server.errors import ServerError

SERVED_MODEL_NAME = "policy"
START_TIMEOUT_S = 600.0
"""vLLM answers /health ~30 s after start on an idle core; a loaded machine takes longer."""
STOP_GRACE_S = 20.0
TOKENIZER_DIR = "tokenizer"
"""A model folder's own tokenizer folder, served instead of the model folder's files: it holds
no `config.json`, so transformers loads `tokenizer.json` as written rather than the model
type's tokenizer class (which, for qwen2, replaces the file's pre-tokenizer)."""
PORT_RETRIES = 3
# One OpenMP thread, 1 GiB of KV cache: a tiny model beside other work on a small node.
ENGINE_ENV = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}


class EngineStartError(ServerError, RuntimeError):
    """The engine exited or did not become healthy in time; the message has its log's tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` process (see the module docstring)."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        log_path: Path,
        *,
        max_model_len: int = 4096,
        enable_prefix_caching: bool = True,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = START_TIMEOUT_S,
        nice: int = 0,
    ) -> None:
        self.python, self.model_dir, self.log_path = python, model_dir, log_path
        own_tokenizer = model_dir / TOKENIZER_DIR
        self.tokenizer_dir = own_tokenizer if own_tokenizer.is_dir() else model_dir
        self.max_model_len = max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.extra_args = tuple(extra_args)
        self.start_timeout_s = start_timeout_s
        self.nice = nice
        self.popen: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.start_seconds = 0.0
        """From spawning the process to its first healthy answer (the last try's)."""
        self._abandon = threading.Event()  # an async caller was cancelled mid-start

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        niced = ["nice", "-n", str(self.nice)] if self.nice else []
        caching = (
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
        return [
            *niced,
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--tokenizer",
            str(self.tokenizer_dir),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--dtype",
            "float32",
            "--enforce-eager",
            "--max-model-len",
            str(self.max_model_len),
            caching,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def _spawn(self) -> None:
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as sink:
            sink.write(f"$ {' '.join(self.command())}\n".encode())
            sink.flush()
            self.popen = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **ENGINE_ENV},
                start_new_session=True,
            )

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def _failed(self, why: str) -> EngineStartError:
        return EngineStartError(f"vLLM engine {why}; log {self.log_path}:\n{self._log_tail()}")

    def _port_taken(self) -> bool:
        return "address already in use" in self._log_tail(20000).lower()

    # Synchronous use (pytest session fixtures, scripts).

    def start(self) -> None:
        for _ in range(PORT_RETRIES):
            self._spawn()
            started = time.monotonic()
            deadline = started + self.start_timeout_s
            with httpx.Client(timeout=5.0) as client:
                while time.monotonic() < deadline:
                    if self._exited() is not None:
                        break
                    if self._abandon.is_set():
                        self.stop()
                        raise self._failed("start abandoned")
                    try:
                        if client.get(f"{self.url}/health").status_code == 200:
                            self.start_seconds = time.monotonic() - started
                            return
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.5)
            if self._exited() is None:
                self.stop()
                raise self._failed(f"not healthy after {self.start_timeout_s:g} s")
            if not self._port_taken():
                raise self._failed(f"exited with {self._exited()} while starting")
        raise self._failed(f"found no free port in {PORT_RETRIES} tries")

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; reaps it."""
        popen, self.popen = self.popen, None
        if popen is None:
            return
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=STOP_GRACE_S)
        # Workers vLLM forked into the group outlive a parent that died first.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Asynchronous use: the same steps off the event loop.

    async def __aenter__(self) -> Self:
        starting = asyncio.ensure_future(asyncio.to_thread(self.start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The thread cannot be cancelled: tell it to give up, and wait until it has.
            self._abandon.set()
            with contextlib.suppress(EngineStartError):
                await starting
            await asyncio.to_thread(self.stop)
            raise
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(asyncio.to_thread(self.stop))
