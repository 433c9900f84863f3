"""A small HTTP/1.1 server on a Unix socket, for the per-rollout LLM proxy.

Why not uvicorn: the proxy opens one listener per rollout (hundreds per server), each
serving a single harness, and its target is <= 2 ms of added latency per call. A listener
here is one `asyncio.start_unix_server`; a request costs a header parse and one write.
What it speaks: keep-alive, `Content-Length` and chunked request bodies, `Expect:
100-continue`, JSON answers with `Content-Length`, and server-sent events as a chunked body.

Every byte a client sends may be hostile (the harness is driven by the policy), so a request
is admitted from its head alone, before its body is read: `admit` (the proxy's key and rate
checks) may answer it there. Bodies are read with their limit enforced while reading
(`agentroll.server.http_body`), against a budget of body bytes that all connections of the
server share; connections beyond `max_connections` are refused at once. A request refused
before its body was read ends its connection (the unread body makes keep-alive impossible).
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentroll.server.errors import BadRequest
from agentroll.server.http_body import (
    BodyBudget,
    BodyError,
    check_length,
    content_length,
    is_chunked,
    read_chunked,
)

log = logging.getLogger("agentroll.server.proxy")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body any proxy accepts; a server's own limit may be lower."""
MAX_CONNECTIONS = 32
IDLE_TIMEOUT_S = 900.0
"""A connection must deliver its next request's head within this (keep-alive idling included)."""
READ_TIMEOUT_S = 60.0
"""A request's body must arrive within this once its head has."""
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: str = ""
    """The target's query string, without the `?` (Google's `alt=sse`, Anthropic's `beta`)."""

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as exc:  # nested past the decoder's depth
            raise BadRequest(f"the body is not JSON: {exc}") from exc


@dataclass(slots=True)
class Response:
    status: int
    body: Any = None
    """JSON-serialisable; ignored when `events` is set."""
    events: AsyncIterator[bytes] | None = None
    """Server-sent events (already framed as `data: ...\\n\\n`), sent as a chunked body."""
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]
Admission = Callable[[str, str, dict[str, str]], Response | None]
"""Judges a request from its method, path and headers, before its body is read: a response
refuses it, None admits it. Must not await (it runs for every request)."""


async def _read_head(reader: asyncio.StreamReader, timeout_s: float) -> bytes | None:
    """The next request's head, or None when the client closed or idled out."""
    try:
        async with asyncio.timeout(timeout_s):
            return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("request head too large", 413) from exc
    except (asyncio.IncompleteReadError, TimeoutError):
        return None


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"malformed request line {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"malformed header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


def _declared_length(headers: dict[str, str]) -> int | None:
    """The request body's length as its head declares it; None for a chunked body."""
    if is_chunked(headers):
        return None
    return content_length(headers.get("content-length", "0"))


def _head_bytes(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


STREAM_FLUSH_BYTES = 1 << 16


async def _write(writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
    headers = {"Connection": "keep-alive" if keep_alive else "close", **response.headers}
    if response.events is None:
        data = json_bytes(response.body)
        headers["Content-Type"] = "application/json"
        headers["Content-Length"] = str(len(data))
        writer.write(_head_bytes(response.status, headers) + data)
        await writer.drain()
        return
    headers.update(
        {
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
        }
    )
    # The events of a sampled turn are ready at once: send them in as few writes (system
    # calls) as the buffer allows, not one per event.
    pending = bytearray(_head_bytes(response.status, headers))
    async for event in response.events:
        pending += b"%x\r\n%b\r\n" % (len(event), event)
        if len(pending) >= STREAM_FLUSH_BYTES:
            writer.write(bytes(pending))
            pending.clear()
            await writer.drain()
    writer.write(bytes(pending) + b"0\r\n\r\n")
    await writer.drain()


def json_bytes(obj: Any) -> bytes:
    """`obj` as UTF-8 JSON. A lone surrogate (a tool call's parsed `\\ud800`) has no UTF-8
    form: it is written as its JSON escape, which is what it is inside a JSON string."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace"
    )


def error_body(status: int, message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error envelope (what OpenAI clients parse into their exceptions)."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code or type_}}


def error_response(
    status: int, message: str, type_: str, code: str | None = None, retry_after_s: int = 1
) -> Response:
    """An OpenAI error answer; a `429` says when to retry (`Retry-After`, whole seconds)."""
    headers = {"Retry-After": str(retry_after_s)} if status == 429 else {}
    return Response(status, error_body(status, message, type_, code), headers=headers)


class UnixHTTPServer:
    """Serves `handler` on a Unix socket until `close()`; one task per connection.

    `admit` judges each request from its head; `max_body_bytes` bounds each request body and
    all bodies held at once (until their handler returns); connections beyond
    `max_connections` get a `429` and are closed without a byte read."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        admit: Admission | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.path = path
        self._handler = handler
        self._admit = admit
        self._max_body = min(max_body_bytes, MAX_BODY_BYTES)
        self._bodies = BodyBudget(self._max_body)
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def body_bytes_held(self) -> int:
        """Request-body bytes read and not yet released (their handlers still run)."""
        return self._bodies.held

    async def start(self, mode: int = 0o666) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._connection, path=str(self.path), limit=MAX_HEAD_BYTES
        )
        # The sandbox user must be able to connect; the socket's directory is the sandbox's own.
        self.path.chmod(mode)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=5.0)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self._max_connections:
            message = f"more than {self._max_connections} open connections to this proxy"
            with contextlib.suppress(ConnectionError):
                refusal = error_response(429, message, "requests", "too_many_connections")
                await _write(writer, refusal, keep_alive=False)
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or stalled mid-request: nothing to answer
        except asyncio.CancelledError:
            # `close()` ends its connections: finish quietly (asyncio would otherwise log
            # each cancelled connection task as an error), unless this task is being cancelled
            # by someone else too.
            current = asyncio.current_task()
            if current is None or current.cancelling() > 1:
                raise
            current.uncancel()
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await _read_head(reader, self._idle_timeout_s)
                if head is None:
                    return
                method, target, version, headers = _parse_head(head)
                path, _, query = target.partition("?")
                keep_alive = (
                    version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                )
                length = _declared_length(headers)
                refusal = None if self._admit is None else self._admit(method, path, headers)
                if refusal is not None:
                    # An unread body would be taken for the next request: only a request
                    # without one leaves the connection usable.
                    keep_alive = keep_alive and length == 0
                    await _write(writer, refusal, keep_alive)
                    if keep_alive:
                        continue
                    return
                body = await self._read_body(reader, writer, headers, length)
            except (BadRequest, BodyError) as exc:
                refusal = error_response(exc.status, str(exc), "invalid_request_error")
                await _write(writer, refusal, keep_alive=False)
                return
            try:
                response = await self._handle(Request(method, path, headers, body, query))
            finally:
                self._bodies.give(len(body))
            await _write(writer, response, keep_alive)
            if not keep_alive:
                return

    async def _read_body(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
        length: int | None,
    ) -> bytes:
        """The body, taken from the shared budget (the caller gives it back). Every limit
        is checked before the bytes it concerns are read."""
        if length is not None:
            check_length(length, self._max_body)
            self._bodies.take(length)
        try:
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(CONTINUE)
            async with asyncio.timeout(self._read_timeout_s):
                if length is None:
                    return await read_chunked(reader, self._max_body, self._bodies)
                return await reader.readexactly(length) if length > 0 else b""
        except BaseException:
            if length is not None:
                self._bodies.give(length)
            raise

    async def _handle(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except BadRequest as exc:
            return error_response(exc.status, str(exc), "invalid_request_error")
        except Exception as exc:  # never let a bug kill the listener; the harness sees a 500
            log.exception("proxy handler failed on %s %s", request.method, request.path)
            return error_response(500, f"proxy error: {exc!r}", "server_error")
