"""A small HTTP/1.1 server on a Unix socket, for the per-rollout LLM proxy.

Why not uvicorn: the proxy opens one listener per rollout (hundreds per server), each
serving a single harness, and its target is <= 2 ms of added latency per call. A listener
here is one `asyncio.start_unix_server`; a request costs a header parse and one write.
What it speaks: keep-alive, `Content-Length` and chunked request bodies, `Expect:
100-continue`, JSON answers with `Content-Length`, and server-sent events as a chunked body.
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("agentroll.server.proxy")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
IDLE_TIMEOUT_S = 900.0
"""A keep-alive connection with no request for this long is closed."""
READ_TIMEOUT_S = 60.0
"""A request's body must arrive within this once its head has."""

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class BadRequest(ValueError):
    """The bytes on the wire are not an HTTP/1.1 request we can serve."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as exc:
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


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The next request's head, or None when the client closed or idled out."""
    try:
        async with asyncio.timeout(IDLE_TIMEOUT_S):
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


async def _read_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]
) -> bytes:
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    async with asyncio.timeout(READ_TIMEOUT_S):
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader)
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError as exc:
            raise BadRequest("invalid Content-Length") from exc
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        return await reader.readexactly(length) if length > 0 else b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readline()
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError as exc:
            raise BadRequest("malformed chunk size") from exc
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass  # trailers
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)
        if len(body) > MAX_BODY_BYTES:
            raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)


def _head_bytes(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _write(writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
    headers = {"Connection": "keep-alive" if keep_alive else "close", **response.headers}
    if response.events is None:
        data = json.dumps(response.body, ensure_ascii=False, separators=(",", ":")).encode()
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
    writer.write(_head_bytes(response.status, headers))
    async for event in response.events:
        writer.write(b"%x\r\n%b\r\n" % (len(event), event))
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def error_body(status: int, message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error envelope (what OpenAI clients parse into their exceptions)."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code or type_}}


class UnixHTTPServer:
    """Serves `handler` on a Unix socket until `close()`; one task per connection."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

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
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away mid-request: nothing to answer
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
                head = await _read_head(reader)
                if head is None:
                    return
                method, path, version, headers = _parse_head(head)
                body = await _read_body(reader, writer, headers)
            except BadRequest as exc:
                body_ = error_body(exc.status, str(exc), "invalid_request_error")
                await _write(writer, Response(exc.status, body_), keep_alive=False)
                return
            keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            try:
                response = await self._handler(Request(method, path.split("?")[0], headers, body))
            except BadRequest as exc:
                response = Response(
                    exc.status, error_body(exc.status, str(exc), "invalid_request_error")
                )
            except Exception as exc:  # never let a bug kill the listener; the harness sees a 500
                log.exception("proxy handler failed on %s %s", method, path)
                response = Response(500, error_body(500, f"proxy error: {exc!r}", "server_error"))
            await _write(writer, response, keep_alive)
            if not keep_alive:
                return
