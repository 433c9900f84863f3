"""A lean keep-alive HTTP/1.1 client for the calls agentroll makes to inference backends.

Why not httpx here: measured on the rollout path, httpx/httpcore cost over half of the
server's CPU per rollout (including a failed module import on every connection release),
and one `httpx.AsyncClient` slows down quadratically with thousands of concurrent requests
(its pool scans all connections per request). Backend calls are simple — JSON POSTs and
GETs to a few hosts — so a small client on asyncio streams does them with a per-host pool of
idle connections and O(1) work per request. Cancelling a call closes its connection, which
is also how vLLM learns to abort the request.
"""

import asyncio
import json
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from agentroll.server.errors import HTTPConnectError, HTTPTimeout, HTTPTransportError
from agentroll.server.http_body import (
    check_length,
    content_length,
    is_chunked,
    read_chunked,
    read_to_close,
)

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HTTPResponse:
    status: int
    body: Any
    """Decoded JSON, or the raw text when the body is not JSON."""


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class HTTPClient:
    def __init__(self, *, timeout_s: float = 600.0, connect_timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._closed = False

    async def request(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> HTTPResponse:
        if self._closed:
            raise RuntimeError("HTTP client is closed")
        parts = urlsplit(url)
        scheme, host = parts.scheme or "http", parts.hostname or "localhost"
        port = parts.port or (443 if scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{urlencode(params)}" if params else "")
        body = b"" if json_body is None else json.dumps(json_body).encode()
        head = f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        if json_body is not None:
            head += "Content-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\nAccept: application/json\r\n\r\n"
        payload = head.encode() + body
        key = (scheme, host, port)
        try:
            async with asyncio.timeout(self._timeout_s if timeout_s is None else timeout_s):
                return await self._exchange(key, payload)
        except TimeoutError as exc:
            raise HTTPTimeout(f"{method} {url} timed out") from exc

    async def _exchange(self, key: tuple[str, str, int], payload: bytes) -> HTTPResponse:
        # A pooled connection the server already closed fails before any response byte;
        # then (and only then) the request never reached the server and is sent again.
        while True:
            conn, reused = await self._acquire(key)
            try:
                conn.writer.write(payload)
                status, keep_alive, raw = await _read_response(conn.reader)
            except _ClosedBeforeResponse as exc:
                conn.close()
                if reused:
                    continue
                raise HTTPTransportError(f"connection closed before a response: {exc}") from exc
            except (
                OSError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
                ValueError,
            ) as exc:
                conn.close()
                raise HTTPTransportError(f"{type(exc).__name__}: {exc}") from exc
            except BaseException:
                conn.close()  # cancelled mid-request: the server sees the disconnect
                raise
            if keep_alive and not self._closed:
                self._idle.setdefault(key, deque()).append(conn)
            else:
                conn.close()
            return HTTPResponse(status, _decode(raw))

    async def _acquire(self, key: tuple[str, str, int]) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable:
                return conn, True
            conn.close()
        scheme, host, port = key
        context = ssl.create_default_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, limit=MAX_HEADER_BYTES
                )
        except (OSError, TimeoutError) as exc:
            raise HTTPConnectError(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return _Connection(reader, writer), False

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()


class _ClosedBeforeResponse(Exception):
    pass


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    try:
        status_line = await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _ClosedBeforeResponse("empty reply") from exc
        raise
    except ConnectionResetError as exc:
        raise _ClosedBeforeResponse("connection reset") from exc
    version, _, rest = status_line.decode("latin-1").partition(" ")
    status = rest[:3]
    if not version.startswith("HTTP/1.") or not status.isdigit():
        raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    keep_alive = headers.get("connection", "").lower() != "close" and version != "HTTP/1.0"
    # A body over the limit, or badly framed, raises `http_body.BodyError` (a ValueError).
    if is_chunked(headers):
        return int(status), keep_alive, await read_chunked(reader, MAX_BODY_BYTES)
    if "content-length" in headers:
        length = content_length(headers["content-length"])
        check_length(length, MAX_BODY_BYTES)
        return int(status), keep_alive, await reader.readexactly(length)
    return int(status), False, await read_to_close(reader, MAX_BODY_BYTES)


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")
