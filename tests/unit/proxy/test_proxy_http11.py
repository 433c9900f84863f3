"""The proxy's HTTP/1.1 server on a real Unix socket: bodies, keep-alive, streams, errors."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from agentroll.server.proxy.http11 import Request, Response, UnixHTTPServer


async def echo(request: Request) -> Response:
    if request.path == "/stream":

        async def events() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"data: {i}\n\n".encode()

        return Response(200, events=events())
    return Response(
        200, {"method": request.method, "path": request.path, "body": request.body.decode()}
    )


async def exchange(path: Path, raw: bytes, reads: int = 1) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(raw)
    out = b""
    try:
        async with asyncio.timeout(5):
            while out.count(b"HTTP/1.1 ") < reads or not out.endswith((b"}", b"0\r\n\r\n")):
                chunk = await reader.read(65536)
                if not chunk:
                    break
                out += chunk
    finally:
        writer.close()
    return out


async def test_keep_alive_chunked_bodies_and_expect_continue(tmp_path: Path) -> None:
    server = UnixHTTPServer(tmp_path / "s.sock", echo)
    await server.start()
    try:
        raw = (
            b"POST /a?x=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        out = await exchange(tmp_path / "s.sock", raw, reads=3)
        assert b'"path":"/a","body":"hello"' in out
        assert b"HTTP/1.1 100 Continue" in out
        assert b'"path":"/b","body":"abcde"' in out
    finally:
        await server.close()
    assert not (tmp_path / "s.sock").exists()


async def test_events_go_out_as_a_chunked_stream(tmp_path: Path) -> None:
    server = UnixHTTPServer(tmp_path / "s.sock", echo)
    await server.start()
    try:
        out = await exchange(tmp_path / "s.sock", b"GET /stream HTTP/1.1\r\n\r\n")
    finally:
        await server.close()
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"text/event-stream" in head
    assert body == b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"


async def test_garbage_gets_a_400_envelope_and_a_closed_connection(tmp_path: Path) -> None:
    server = UnixHTTPServer(tmp_path / "s.sock", echo)
    await server.start()
    try:
        out = await exchange(tmp_path / "s.sock", b"NONSENSE\r\n\r\n")
    finally:
        await server.close()
    assert out.startswith(b"HTTP/1.1 400 Bad Request")
    assert b"Connection: close" in out and b'"type":"invalid_request_error"' in out
