"""Host-side client of one sandbox's action server: one connection, created once, reused.

Requests are multiplexed on the connection by id; a background task reads replies and hands
each to its waiting call. Every call is bounded by its own timeout plus ``call_margin`` (the
server's own interrupt/restart work), so a dead or hung server never hangs the host: a lost
connection fails every waiting call with :class:`ActionServerUnavailable` at once.

Error tree: see :mod:`agentroll.runtime.action.errors`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import time
from collections.abc import Sequence
from typing import Any, Literal

from agentroll.runtime.action import protocol
from agentroll.runtime.action.errors import (
    ActionError,
    ActionProtocolError,
    ActionRequestError,
    ActionServerUnavailable,
    ActionTimeout,
)
from agentroll.runtime.action.protocol import BashResult, EditorResult, PythonResult

EditorCommand = Literal["view", "create", "str_replace", "insert", "undo_edit"]
# The server's own bounded work beyond the call timeout: interrupt, kill, restart a shell.
BASH_MARGIN_S = 15.0
# Python calls may first have to start (or restart) the kernel.
PYTHON_MARGIN_S = 75.0


class ActionClient:
    """Async client; safe to share between tasks of one event loop."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        request_timeout: float = 30.0,
        call_margin: float = BASH_MARGIN_S,
    ) -> None:
        self.socket_path = os.fspath(socket_path)
        self.request_timeout = request_timeout
        self.call_margin = call_margin
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lost: ActionError | None = None

    # -- connection ----------------------------------------------------------------------------

    async def connect(self, timeout: float) -> None:  # noqa: ASYNC109 (the contract's name)
        """Connect and wait until the server answers ``alive``; retries until ``timeout``."""
        if self._writer is not None:
            await self._detach()  # reconnecting replaces the old connection
        deadline = time.monotonic() + timeout
        delay = 0.005
        last: BaseException | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ActionServerUnavailable(
                    f"action server at {self.socket_path} did not answer within {timeout:g} s"
                    + (f": {last}" if last else "")
                ) from last
            try:
                async with asyncio.timeout(remaining):
                    reader, writer = await asyncio.open_unix_connection(
                        self.socket_path, limit=2**16
                    )
                self._attach(reader, writer)
                await self._call("alive", {}, min(remaining, self.request_timeout))
                return
            except (OSError, ActionError, TimeoutError) as exc:
                last = exc
                await self._detach()
            await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.1)

    def _attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer, self._lost = reader, writer, None
        self._read_task = asyncio.create_task(self._read_loop(reader))

    async def _detach(self) -> None:
        task, writer = self._read_task, self._writer
        self._read_task = self._reader = self._writer = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 1.0)
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
        self._fail_pending(ActionServerUnavailable("connection to the action server was closed"))

    async def close(self) -> None:
        """Close the connection (the server keeps running)."""
        await self._detach()

    async def __aenter__(self) -> ActionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _fail_pending(self, error: ActionError) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        error: ActionError
        try:
            while True:
                length = protocol.frame_length(await reader.readexactly(4))
                message = protocol.decode_body(await reader.readexactly(length))
                request_id = message.get("id")
                future = (
                    self._pending.pop(request_id, None) if isinstance(request_id, int) else None
                )
                if future is not None:
                    if not future.done():
                        future.set_result(message)
                elif "error" in message and request_id is None:
                    detail = message["error"].get("message", "")
                    raise ActionProtocolError(f"action server rejected the connection: {detail}")
                # Anything else answers a call that already timed out: dropped.
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            error = ActionServerUnavailable(f"connection to the action server was lost: {exc!r}")
        except ActionProtocolError as exc:
            error = exc
        self._lost = error
        self._fail_pending(error)
        if self._writer is not None:
            self._writer.close()

    # -- calls ---------------------------------------------------------------------------------

    async def _call(self, op: str, args: dict[str, Any], limit_s: float) -> dict[str, Any]:
        writer = self._writer
        if writer is None:
            raise ActionServerUnavailable("not connected to the action server (call connect())")
        if self._lost is not None:
            raise ActionServerUnavailable(f"action server connection is gone: {self._lost}")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            writer.write(protocol.encode_frame({"id": request_id, "op": op, "args": args}))
            async with asyncio.timeout(limit_s):
                await writer.drain()
                reply = await future
        except TimeoutError as exc:
            raise ActionTimeout(
                f"{op}: no reply from the action server within {limit_s:g} s"
            ) from exc
        except ConnectionError as exc:
            raise ActionServerUnavailable(f"{op}: connection lost: {exc}") from exc
        finally:
            self._pending.pop(request_id, None)
        error = reply.get("error")
        if error is not None:
            kind, message = error.get("type"), error.get("message", "")
            if kind == protocol.BAD_REQUEST:
                raise ActionRequestError(f"{op}: {message}")
            if kind in (protocol.PROTOCOL, protocol.FRAME_TOO_LARGE):
                raise ActionProtocolError(f"{op}: {message}")
            raise ActionError(f"{op}: action server failed: {message}")
        result = reply.get("result")
        if not isinstance(result, dict):
            raise ActionProtocolError(f"{op}: reply without a result object")
        return result

    async def alive(self) -> dict[str, Any]:
        return await self._call("alive", {}, self.request_timeout)

    async def bash(
        self,
        command: str,
        *,
        timeout: float = 120.0,  # noqa: ASYNC109 (the command's limit, enforced by the server)
        no_output_timeout: float | None = None,
        max_output_chars: int = 30_000,
    ) -> BashResult:
        args = {
            "command": command,
            "timeout": timeout,
            "no_output_timeout": no_output_timeout,
            "max_output_chars": max_output_chars,
        }
        return BashResult.from_wire(await self._call("bash", args, timeout + self.call_margin))

    async def interrupt_bash(self) -> None:
        await self._call("bash_interrupt", {}, self.request_timeout)

    async def python(
        self,
        code: str,
        *,
        timeout: float = 120.0,  # noqa: ASYNC109 (the code's limit, enforced by the server)
        max_output_chars: int = 30_000,
    ) -> PythonResult:
        args = {"code": code, "timeout": timeout, "max_output_chars": max_output_chars}
        wait = timeout + max(self.call_margin, PYTHON_MARGIN_S)
        return PythonResult.from_wire(await self._call("python", args, wait))

    async def interrupt_python(self) -> None:
        await self._call("python_interrupt", {}, self.request_timeout)

    async def editor(self, command: EditorCommand, path: str, **kwargs: Any) -> EditorResult:
        """``view`` (view_range=[start, end]), ``create`` (file_text, overwrite=False),
        ``str_replace`` (old_str, new_str), ``insert`` (insert_line, new_str), ``undo_edit``."""
        args = {**kwargs, "command": command, "path": path}
        return EditorResult.from_wire(await self._call("editor", args, self.request_timeout))

    async def upload(self, path: str, data: bytes) -> None:
        if len(data) > protocol.MAX_TRANSFER_BYTES:
            raise ActionRequestError(
                f"upload of {len(data)} bytes exceeds {protocol.MAX_TRANSFER_BYTES} bytes"
            )
        args = {"path": path, "data_b64": base64.b64encode(data).decode("ascii")}
        await self._call("upload", args, self.request_timeout)

    async def download(self, path: str) -> bytes:
        result = await self._call("download", {"path": path}, self.request_timeout)
        try:
            return base64.b64decode(result["data_b64"], validate=True)
        except (KeyError, ValueError) as exc:
            raise ActionProtocolError(f"download: malformed reply: {exc}") from exc

    async def warm(
        self,
        tools: Sequence[str],
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 (bounds the call, as every call's limit does)
    ) -> dict[str, float]:
        """Start these tools' sessions (``bash``, ``python``) now, so their first call costs
        what any other does; returns the seconds each took to start (0 if it already ran)."""
        reply = await self._call("warm", {"tools": list(tools)}, timeout)
        return {str(k): float(v) for k, v in dict(reply["started_s"]).items()}

    async def stop_agent(self, *, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (the server's)
        """Kill every process the server's tools started; returns once all are gone.

        The tools restart on their next call. Raises ``ActionError`` if any outlives ``timeout``.
        """
        await self._call("stop_agent", {"timeout": timeout}, timeout + self.call_margin)

    async def orphans_reaped(self) -> int | None:
        """How many orphans the server reaped since it started, counted only where it is the
        PID namespace's init (every orphan of the sandbox is its then); None elsewhere."""
        reply = await self._call("orphans", {}, self.request_timeout)
        return int(reply["reaped"]) if reply.get("init") is True else None

    async def shutdown(self) -> None:
        """Ask the server to stop (it kills bash and the kernel, removes its socket)."""
        with contextlib.suppress(ActionServerUnavailable):
            await self._call("shutdown", {}, self.request_timeout)
