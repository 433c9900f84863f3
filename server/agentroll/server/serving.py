"""Running ASGI apps under uvicorn: in the foreground (CLI) or inside a running loop
(the demo, tests and benchmarks), always on a socket we bound, so port 0 works and the
real address is known before the first request."""

import asyncio
import contextlib
import importlib.util
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _exit_hook(app: Any, server: uvicorn.Server) -> None:
    """Lets the app stop its own server (`POST /v1/admin/shutdown`)."""
    state = getattr(app, "state", None)
    if state is not None:
        state.request_exit = lambda: setattr(server, "should_exit", True)


def _config(app: Any, log_level: str) -> uvicorn.Config:
    fast = importlib.util.find_spec("uvloop") is not None
    return uvicorn.Config(
        app,
        loop="uvloop" if fast else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=10,  # then open requests are cancelled; jobs drain after
        backlog=4096,
    )


@dataclass
class RunningServer:
    url: str
    server: uvicorn.Server
    task: "asyncio.Task[None]"

    @property
    def token(self) -> str | None:
        """The API token of an agentroll app (configured or generated); None for other apps."""
        state = getattr(self.server.config.app, "state", None)
        token: str | None = getattr(state, "api_token", None)
        return token

    async def stop(self, timeout_s: float = 30.0, cancel_wait_s: float = 10.0) -> None:
        """Asks the server to exit and waits `timeout_s`; then cancels it and waits at most
        `cancel_wait_s` more. A server that outlives its cancellation (an app whose shutdown
        swallows it) is a `TimeoutError` naming it, never a caller left waiting forever."""
        begin = getattr(getattr(self.server.config.app, "state", None), "begin_shutdown", None)
        if begin is not None:
            begin()
        self.server.should_exit = True
        await asyncio.wait({self.task}, timeout=timeout_s)
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=cancel_wait_s)
        if not self.task.done():
            self.task.print_stack()  # where it is stuck, on stderr
            raise TimeoutError(
                f"server at {self.url} still running {cancel_wait_s:g} s after its cancellation"
            )
        if not self.task.cancelled():
            self.task.result()  # a serve that failed on its way out raises here


class _Server(uvicorn.Server):
    """Tells the app the moment shutdown starts (SIGTERM, SIGINT): uvicorn waits for open
    requests before the app's own shutdown runs, so long-polls must be released first."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        begin = getattr(getattr(self.config.app, "state", None), "begin_shutdown", None)
        if begin is not None:
            begin()
        super().handle_exit(sig, frame)


class _QuietServer(_Server):
    """Leaves signal handling to the host program (the demo, a test, a benchmark)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


async def start_in_loop(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    log_level: str = "warning",
    start_timeout_s: float = 60.0,
) -> RunningServer:
    """Serve `app` as a task of the running loop; returns once it accepts connections."""
    sock = bind(host, port)
    server = _QuietServer(_config(app, log_level))
    _exit_hook(app, server)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"uvicorn:{url_of(sock)}")
    running = RunningServer(url_of(sock), server, task)
    give_up = asyncio.get_running_loop().time() + start_timeout_s
    while not server.started:
        if task.done():
            task.result()  # start-up failed: raise its error
            raise RuntimeError("server exited during start-up")
        if asyncio.get_running_loop().time() > give_up:
            await running.stop()
            raise TimeoutError(f"server did not start within {start_timeout_s:g} s")
        await asyncio.sleep(0.01)
    return running


def serve_forever(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    url_file: Path | None = None,
    announce: Callable[[str], None] | None = None,
) -> uvicorn.Server:
    """Serve in the foreground until SIGINT/SIGTERM; writes the URL to `url_file` and tells
    it to `announce` first."""
    sock = bind(host, port)
    if url_file is not None:
        url_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = url_file.with_suffix(url_file.suffix + ".tmp")
        tmp.write_text(url_of(sock) + "\n")
        tmp.replace(url_file)  # readers never see a half-written file
    if announce is not None:
        announce(url_of(sock))
    server = _Server(_config(app, log_level))
    _exit_hook(app, server)
    server.run(sockets=[sock])
    return server
