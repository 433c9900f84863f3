"""The action server: an asyncio Unix-domain-socket server in front of the tool sessions.

Each connection reads frames in a loop and runs every request as its own task, so calls to
different tools overlap on one connection; calls to the same bash or Python session serialize
on that session's lock. At most ``MAX_IN_FLIGHT`` requests run per connection (reading pauses
beyond that). On a ``shutdown`` request (or SIGTERM/SIGINT, unless serving a sandbox) the
server stops accepting, kills bash, the kernel and every other process below it, and removes
its socket and private state directory.

A sandbox's server (``single_client``) serves exactly one connection, the host's: once it is
accepted the server stops listening and unlinks the socket, so no process inside the sandbox
can ever connect (to send ``shutdown``, say) and deleting or replacing the path changes
nothing; the host never reconnects (warm-pool hand-outs keep the connection made at start).
When that connection ends the server stops: nobody could reach it any more.

With ``listen_fd`` the server is handed a socket the host already bound and listens on (the
host unlinks it once connected), so the socket's directory can be read-only inside the
sandbox: nothing the agent runs can write to it. Its private state (the long-command file,
the kernel's connection file) then lives in a fresh folder under ``$TMPDIR``.

``stop_agent`` kills every process the agent started (children.py) and returns once they are
gone; the sessions start afresh on their next call. Orphans are reaped on every SIGCHLD;
``orphans`` says how many were reaped so far.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentroll.runtime.action import protocol
from agentroll.runtime.action.bash import BashSession
from agentroll.runtime.action.children import Children
from agentroll.runtime.action.errors import ActionProtocolError, ActionRequestError
from agentroll.runtime.action.files import FileTools
from agentroll.runtime.action.guard import Confinement, is_namespace_init
from agentroll.runtime.action.ipython import PythonSession

MAX_IN_FLIGHT = 64
WRITE_TIMEOUT_S = 30.0
SHUTDOWN_GRACE_S = 5.0
MAX_SOCKET_PATH = 107
MAX_OUTPUT_CHARS = 10_000_000  # keeps one reply well inside a frame
REAP_INTERVAL_S = 0.05  # a fork bomb's SIGCHLD storm costs at most 20 /proc scans a second


_MISSING: Any = object()


def _arg(
    args: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = _MISSING
) -> Any:
    """Argument ``name`` checked against ``kind``; ``default`` when absent or null."""
    if args.get(name) is None:
        if default is _MISSING:
            raise ActionRequestError(f"missing argument {name!r}")
        return default
    value = args[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ActionRequestError(f"argument {name!r} must be {names}")
    return value


def _timeout(args: dict[str, Any], name: str, default: float | None) -> float | None:
    value = _arg(args, name, (int, float), default)
    if value is not None and not 0 < value <= 86_400:
        raise ActionRequestError(f"argument {name!r} must be between 0 and 86400 seconds")
    return None if value is None else float(value)


def _output_limit(args: dict[str, Any]) -> int:
    value = _arg(args, "max_output_chars", int, 30_000)
    if not 1 <= value <= MAX_OUTPUT_CHARS:
        raise ActionRequestError(f"max_output_chars must be between 1 and {MAX_OUTPUT_CHARS}")
    return int(value)


class ActionServer:
    def __init__(
        self,
        socket_path: str,
        *,
        roots: Sequence[str] = (),
        workdir: str | None = None,
        state_dir: str | None = None,
        single_client: bool = False,
        confinement: Confinement | None = None,
        listen_fd: int | None = None,
    ) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self.single_client = single_client
        self._listen_fd = listen_fd
        self.children = Children(confinement or Confinement())
        self._socket_owned = False  # the path is ours to unlink
        self._client_accepted = False
        self._reap_scheduled = False
        self._last_reap = 0.0
        self.workdir = os.path.abspath(workdir or os.getcwd())
        self.roots = [os.path.abspath(r) for r in roots] or [self.workdir]
        self._state_dir_arg = state_dir
        self.state_dir = ""
        self.files = FileTools(self.roots, self.workdir)
        self.bash: BashSession | None = None
        self.python: PythonSession | None = None
        self._server: asyncio.AbstractServer | None = None
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()  # requests and background work
        self._connections: set[asyncio.Task[Any]] = set()
        self._started = time.monotonic()
        self._ops: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "alive": self._alive,
            "bash": self._bash,
            "bash_interrupt": self._bash_interrupt,
            "python": self._python,
            "python_interrupt": self._python_interrupt,
            "editor": self._editor,
            "upload": self._upload,
            "download": self._download,
            "stop_agent": self._stop_agent,
            "orphans": self._orphans,
            "warm": self._warm,
            "shutdown": self._shutdown,
        }

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if len(self.socket_path.encode()) > MAX_SOCKET_PATH:
            raise ValueError(
                f"socket path is longer than {MAX_SOCKET_PATH} bytes: {self.socket_path}"
            )
        parent = os.path.dirname(self.socket_path)
        if self._listen_fd is None:
            os.makedirs(parent, mode=0o700, exist_ok=True)
            self._remove_stale_socket()
        if self._state_dir_arg:
            os.makedirs(self._state_dir_arg, mode=0o700, exist_ok=True)
            self.state_dir = self._state_dir_arg
        else:
            # Beside our own socket (the sandbox's private directory); under $TMPDIR when the
            # host owns the socket and its directory is read-only for us.
            beside = parent if self._listen_fd is None else None
            self.state_dir = tempfile.mkdtemp(prefix=".agentroll-action-", dir=beside)
        self.bash = BashSession(
            workdir=self.workdir, state_dir=self.state_dir, children=self.children
        )
        self.python = PythonSession(
            workdir=self.workdir, state_dir=self.state_dir, children=self.children
        )
        if self._listen_fd is not None:
            listener = socket.socket(fileno=self._listen_fd)
            self._server = await asyncio.start_unix_server(
                self._serve_connection, sock=listener, limit=2**16
            )
        else:
            old_umask = os.umask(0o177)  # born 0600: no window where others can connect
            try:
                self._server = await asyncio.start_unix_server(
                    self._serve_connection, path=self.socket_path, limit=2**16
                )
            finally:
                os.umask(old_umask)
            self._socket_owned = True
            os.chmod(self.socket_path, 0o600)
        # Warm bash in the background: the socket is already answering `alive`.
        self._spawn_task(self._start_bash())

    def _remove_stale_socket(self) -> None:
        if not os.path.exists(self.socket_path):
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.socket_path)
        except OSError:
            os.unlink(self.socket_path)  # nobody is listening: left over from a crash
            return
        finally:
            probe.close()
        raise RuntimeError(f"another action server is already serving {self.socket_path}")

    async def _start_bash(self) -> None:
        assert self.bash is not None
        with contextlib.suppress(Exception):  # the first bash call retries and reports
            await self.bash.start()

    def _spawn_task(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def request_stop(self) -> None:
        self._stop.set()

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        # A sandbox's server ends only at the host's request (guard.py handles the signals).
        stop_signals = [] if self.single_client or is_namespace_init() else [
            signal.SIGTERM, signal.SIGINT
        ]  # fmt: skip
        for sig in stop_signals:
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGCHLD, self._schedule_reap)
        try:
            await self._stop.wait()
        finally:
            for sig in (*stop_signals, signal.SIGCHLD):
                loop.remove_signal_handler(sig)
            await self.close()

    def _schedule_reap(self) -> None:
        if self._reap_scheduled:
            return
        self._reap_scheduled = True
        loop = asyncio.get_running_loop()
        loop.call_later(max(self._last_reap + REAP_INTERVAL_S - loop.time(), 0), self._reap)

    def _reap(self) -> None:
        self._reap_scheduled = False
        self._last_reap = asyncio.get_running_loop().time()
        self.children.reap_orphans()

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._socket_owned:
            self._socket_owned = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

    async def close(self) -> None:
        self._stop_listening()
        # Killing the sessions first makes in-flight calls return quickly.
        sessions = [s.close() for s in (self.bash, self.python) if s is not None]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHUTDOWN_GRACE_S * 2):
                await asyncio.gather(*sessions, return_exceptions=True)
        self.children.kill_all()  # whatever the agent left running or detached
        self.children.reap_orphans()
        pending = [t for t in self._tasks if t is not asyncio.current_task()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
            for task in still:
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=1.0)
        # Connections idle in a read would wait forever; their replies are all sent by now.
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=1.0)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()
        if self.state_dir and not self._state_dir_arg:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- connections ---------------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self.single_client:
            if self._client_accepted:
                writer.close()  # queued behind the host's connection: never served
                return
            self._client_accepted = True
            self._stop_listening()
        me = asyncio.current_task()
        assert me is not None
        self._connections.add(me)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        try:
            while not self._stop.is_set():
                try:
                    length = protocol.frame_length(await reader.readexactly(4))
                    body = await reader.readexactly(length)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except ActionProtocolError as exc:
                    await self._send(writer, self._error(None, protocol.FRAME_TOO_LARGE, str(exc)))
                    return
                await slots.acquire()
                task = self._spawn_task(self._handle(body, writer))
                task.add_done_callback(lambda _: slots.release())
        finally:
            self._connections.discard(me)
            writer.close()
            if self.single_client:
                self.request_stop()  # the host is gone; nobody can reach the server any more

    @staticmethod
    def _error(request_id: Any, kind: str, message: str) -> dict[str, Any]:
        return {"id": request_id, "error": {"type": kind, "message": message}}

    async def _handle(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        request_id = None
        try:
            request = protocol.decode_body(body)
            request_id = request.get("id")
            op, args = request.get("op"), request.get("args", {})
            if not isinstance(request_id, int) or not isinstance(args, dict):
                raise ActionRequestError("a request needs an integer 'id' and an object 'args'")
            handler = self._ops.get(op) if isinstance(op, str) else None
            if handler is None:
                raise ActionRequestError(f"unknown op {op!r}; known: {', '.join(protocol.OPS)}")
            reply = {"id": request_id, "result": await handler(args)}
        except ActionProtocolError as exc:
            reply = self._error(request_id, protocol.PROTOCOL, str(exc))
        except ActionRequestError as exc:
            reply = self._error(request_id, protocol.BAD_REQUEST, str(exc))
        except Exception as exc:
            print(f"action server: {type(exc).__name__}: {exc}", file=sys.stderr)
            reply = self._error(request_id, protocol.INTERNAL, f"{type(exc).__name__}: {exc}")
        await self._send(writer, reply)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        try:
            frame = protocol.encode_frame(message)
        except ActionProtocolError as exc:
            frame = protocol.encode_frame(
                ActionServer._error(message.get("id"), protocol.FRAME_TOO_LARGE, str(exc))
            )
        if writer.is_closing():
            return  # the client went away; the result has nowhere to go
        writer.write(frame)  # one call per frame: frames never interleave
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await writer.drain()

    # -- ops -----------------------------------------------------------------------------------

    async def _alive(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "protocol": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self._started, 3),
            "workdir": self.workdir,
            "roots": self.roots,
            "bash": bool(self.bash and self.bash.running),
            "python": bool(self.python and self.python.started),
        }

    async def _bash(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.bash is not None
        return await self.bash.run(
            _arg(args, "command", str),
            time_limit=_timeout(args, "timeout", 120.0) or 120.0,
            no_output_timeout=_timeout(args, "no_output_timeout", None),
            max_output_chars=_output_limit(args),
        )

    async def _bash_interrupt(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.bash is not None
        return {"interrupted": self.bash.interrupt()}

    async def _python(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.python is not None
        return await self.python.run(
            _arg(args, "code", str),
            time_limit=_timeout(args, "timeout", 120.0) or 120.0,
            max_output_chars=_output_limit(args),
        )

    async def _python_interrupt(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.python is not None
        return {"interrupted": self.python.interrupt()}

    async def _editor(self, args: dict[str, Any]) -> dict[str, Any]:
        command = _arg(args, "command", str)
        path = _arg(args, "path", str)
        _output_limit(args)
        ok, output = await asyncio.to_thread(self.files.editor, command, path, args)
        return {"ok": ok, "output": output}

    async def _upload(self, args: dict[str, Any]) -> dict[str, Any]:
        path = _arg(args, "path", str)
        try:
            data = base64.b64decode(_arg(args, "data_b64", str), validate=True)
        except ValueError as exc:
            raise ActionRequestError(f"upload data is not valid base64: {exc}") from exc
        return {"path": await asyncio.to_thread(self.files.upload, path, data)}

    async def _download(self, args: dict[str, Any]) -> dict[str, Any]:
        data = await asyncio.to_thread(self.files.download, _arg(args, "path", str))
        return {"data_b64": base64.b64encode(data).decode("ascii"), "size": len(data)}

    async def _warm(self, args: dict[str, Any]) -> dict[str, Any]:
        """Start the named tools' sessions now, together; how long each took to start."""
        assert self.bash is not None and self.python is not None
        tools = _arg(args, "tools", list)
        unknown = [t for t in tools if t not in protocol.WARM_TOOLS]
        if unknown:
            raise ActionRequestError(f"cannot warm {unknown}; known: {list(protocol.WARM_TOOLS)}")
        sessions = {"bash": self.bash.start, "python": self.python.start}

        async def timed(name: str) -> float:
            began = time.monotonic()
            await sessions[name]()
            return round(time.monotonic() - began, 6)

        names = list(dict.fromkeys(tools))
        took = await asyncio.gather(*(timed(n) for n in names))
        return {"started_s": dict(zip(names, took, strict=True))}

    async def _stop_agent(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self.bash is not None and self.python is not None
        timeout = _timeout(args, "timeout", 30.0) or 30.0
        self.children.kill_all()  # first, so in-flight tool calls come back at once
        left: list[int] = []
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(self.bash.reset(), self.python.reset())
                while True:
                    self.children.kill_all()
                    self.children.reap_orphans()
                    left = self.children.agent_pids()
                    if not left:
                        return {"ok": True}
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise RuntimeError(
                f"the agent's processes {left[:20]} still run after {timeout:g} s"
            ) from None

    async def _orphans(self, args: dict[str, Any]) -> dict[str, Any]:
        # Reaped first: an orphan that exited before this call is counted by it, not after.
        self.children.reap_orphans()
        return {"reaped": self.children.orphans_reaped, "init": is_namespace_init()}

    async def _shutdown(self, args: dict[str, Any]) -> dict[str, Any]:
        # Reply first; the stop happens once this request's answer is on its way.
        asyncio.get_running_loop().call_soon(self.request_stop)
        return {"ok": True}
