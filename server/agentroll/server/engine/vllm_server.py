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
import shutil
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

from agentroll.server.errors import EngineStartError

SERVED_MODEL_NAME = "policy"
START_TIMEOUT_S = 600.0
"""vLLM answers /health ~30 s after start on an idle core; a loaded machine takes longer."""
STOP_GRACE_S = 20.0
TOKENIZER_DIR = "tokenizer"
"""A model folder's own tokenizer folder, served instead of the model folder's files: it holds
no `config.json`, so transformers loads `tokenizer.json` as written rather than the model
type's tokenizer class (which, for qwen2, replaces the file's pre-tokenizer)."""
PORT_RETRIES = 3
BATCHED_TOKENS = 8192
# One OpenMP thread, 1 GiB of KV cache: a tiny model beside other work on a small node.
ENGINE_ENV = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _exit_status(pid: int) -> int | None:
    """The child's exit status (negative: the signal) once it ended, else None; it stays
    unreaped, so its process group id stays ours."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _ended(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _exit_status(pid) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


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
        self._log_start = 0
        """Where this spawn's output begins in the (appended-to) log."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        niced = ["nice", "-n", str(self.nice)] if self.nice else []
        # If this process dies without stopping it (SIGKILL, a crash), the engine gets SIGTERM.
        orphan_guard = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
        caching = (
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
        return [
            *orphan_guard,
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
            # vLLM 0.32's CPU worker dies ("CPU Generator does not use offset") when a seeded
            # request's prompt is split across steps by chunked prefill: whole prompts only.
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(self.max_model_len, BATCHED_TOKENS)),
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
            self._log_start = sink.tell()
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
        return None if self.popen is None else _exit_status(self.popen.pid)

    def _failed(self, why: str) -> EngineStartError:
        return EngineStartError(f"vLLM engine {why}; log {self.log_path}:\n{self._log_tail()}")

    def _port_taken(self) -> bool:
        """Whether this spawn (not an earlier run or try in the same log) lost its port."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                this_spawn = log.read().decode(errors="replace")
        except OSError:
            return False
        return "address already in use" in this_spawn.lower()

    def _healthy(self) -> bool:
        """Polls `/health`: True once it answers, False if the process exited first."""
        started = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < started + self.start_timeout_s:
                if self._exited() is not None:
                    return False
                if self._abandon.is_set():
                    raise self._failed("start abandoned")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self.start_seconds = time.monotonic() - started
                        return True
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        raise self._failed(f"not healthy after {self.start_timeout_s:g} s")

    def _unless_port_taken(self) -> None:
        """After an exit while starting: a lost race for the port is retried, the rest not."""
        if not self._port_taken():
            raise self._failed(f"exited with {self._exited()} while starting")

    # Synchronous use (pytest session fixtures, scripts).

    def start(self) -> None:
        try:
            for _ in range(PORT_RETRIES):
                self._spawn()
                if self._healthy():
                    return
                self._unless_port_taken()
            raise self._failed(f"found no free port in {PORT_RETRIES} tries")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; then reaps it.

        The group is signalled only while its leader is unreaped: the zombie keeps the group
        id ours (a reaped leader's id may come to lead a stranger's group)."""
        popen, self.popen = self.popen, None
        if popen is None:
            return
        if popen.returncode is None:
            _signal_group(popen.pid, signal.SIGTERM)
            if not _ended(popen.pid, STOP_GRACE_S):
                _signal_group(popen.pid, signal.SIGKILL)
                _ended(popen.pid, STOP_GRACE_S)
            # Workers vLLM forked into the group outlive a parent that died first.
            _signal_group(popen.pid, signal.SIGKILL)
        popen.wait(timeout=STOP_GRACE_S)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Asynchronous use: the same steps off the event loop.

    async def __aenter__(self) -> Self:
        try:
            for _ in range(PORT_RETRIES):
                self._spawn()  # on the loop's thread, which outlives it (parent-death signal)
                if await self._await_healthy():
                    return self
                self._unless_port_taken()
            raise self._failed(f"found no free port in {PORT_RETRIES} tries")
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.stop))
            raise

    async def _await_healthy(self) -> bool:
        polling = asyncio.ensure_future(asyncio.to_thread(self._healthy))
        try:
            return await asyncio.shield(polling)
        except asyncio.CancelledError:
            # The thread cannot be cancelled: tell it to give up, and wait until it has.
            self._abandon.set()
            with contextlib.suppress(EngineStartError):
                await polling
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.shield(asyncio.to_thread(self.stop))
