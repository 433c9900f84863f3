"""The proxy's HTTP/1.1 server on a real Unix socket: bodies, keep-alive, streams, errors,
and hostile clients (oversized or malformed bodies, refusals from the head, slow clients)."""

import asyncio
import contextlib
import json
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentroll.server.http_body import max_chunks
from agentroll.server.proxy.http11 import Request, Response, UnixHTTPServer, error_response


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


# -- hostile clients: every limit holds before the bytes it concerns are read ----------------

LIMIT = 1024
CHUNKED_HEAD = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
TEN_CHUNKS = b"".join(b"64\r\n" + b"x" * 100 + b"\r\n" for _ in range(10))  # 1000 bytes


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[UnixHTTPServer, list[Request]]]:
    """A server with a 1 KiB body limit that records the requests its handler got."""
    handled: list[Request] = []

    async def record(request: Request) -> Response:
        handled.append(request)
        return await echo(request)

    server = UnixHTTPServer(tmp_path / "s.sock", record, max_body_bytes=LIMIT)
    await server.start()
    yield server, handled
    await server.close()


async def answer_then_close(path: Path, raw: bytes) -> bytes:
    """Send `raw` and nothing more; return all the server writes until it closes. (A server
    that closes with some of `raw` unread resets the connection after its answer.)"""
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(raw)
    answer = b""
    try:
        async with asyncio.timeout(10):
            while data := await reader.read(65536):
                answer += data
    except ConnectionResetError:
        pass
    finally:
        writer.close()
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def refusal(answer: bytes) -> dict[str, Any]:
    """The OpenAI error of an answer that closes its connection."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"Connection: close" in head
    return dict(json.loads(body)["error"])


async def test_one_huge_chunk_header_is_refused_before_its_data_is_read(
    served: tuple[UnixHTTPServer, list[Request]],
) -> None:
    server, handled = served
    answer = await answer_then_close(server.path, CHUNKED_HEAD + b"7fffffff\r\nabc")
    assert status_of(answer) == 413
    assert f"larger than the limit of {LIMIT} bytes" in refusal(answer)["message"]
    assert handled == [] and server.body_bytes_held == 0


async def test_many_small_chunks_are_refused_at_the_one_that_would_cross_the_limit(
    served: tuple[UnixHTTPServer, list[Request]],
) -> None:
    server, handled = served
    # Exactly the limit is fine...
    last = b"18\r\n" + b"y" * 24 + b"\r\n0\r\n\r\n"
    fits = await exchange(server.path, CHUNKED_HEAD + TEN_CHUNKS + last)
    assert status_of(fits) == 200 and len(handled[0].body) == LIMIT
    # ...but the 11th chunk's size line alone takes it past: refused, its data never sent.
    answer = await answer_then_close(server.path, CHUNKED_HEAD + TEN_CHUNKS + b"64\r\n")
    assert status_of(answer) == 413 and len(handled) == 1
    assert server.body_bytes_held == 0


async def test_a_body_in_tiny_chunks_is_refused_past_the_chunk_count(tmp_path: Path) -> None:
    """One byte at a time, each a chunk: millions of reads and allocations for one body. Past
    one chunk per KiB of the limit (at least 1024) it is refused, whatever its size."""
    limit = 4 << 20
    server = UnixHTTPServer(tmp_path / "tiny.sock", echo, max_body_bytes=limit)
    await server.start()
    try:
        tiny = b"1\r\nx\r\n" * (max_chunks(limit) + 1)
        answer = await answer_then_close(server.path, CHUNKED_HEAD + tiny + b"0\r\n\r\n")
    finally:
        await server.close()
    assert status_of(answer) == 413
    assert f"more than {max_chunks(limit)} chunks" in refusal(answer)["message"]
    assert max_chunks(limit) == 4096


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"1" * 200_000, "chunk-size line longer than"),  # never ends
        (b"0" * 2000 + b"1\r\n", "chunk-size line longer than"),
        (b"-1\r\n", "malformed chunk size"),
        (b"0x10\r\n", "malformed chunk size"),
        (b"+5\r\n", "malformed chunk size"),
        (b"1_0\r\n", "malformed chunk size"),
        (b"zz\r\n", "malformed chunk size"),
        (b"\r\n", "malformed chunk size"),
        (b"1" * 17 + b"\r\n", "malformed chunk size"),  # more than 64 bits
        (b"3\r\nabcXY", "not followed by CRLF"),
        (b"0\r\n" + b"X-Trailer: y\r\n" * 5000, "trailer section longer than"),
    ],
)
async def test_malformed_or_endless_chunk_framing_is_a_400(
    served: tuple[UnixHTTPServer, list[Request]], tail: bytes, why: str
) -> None:
    server, handled = served
    answer = await answer_then_close(server.path, CHUNKED_HEAD + tail)
    assert status_of(answer) == 400 and why in refusal(answer)["message"]
    assert handled == [] and server.body_bytes_held == 0


@pytest.mark.parametrize(
    ("length", "status"),
    [
        (b"99999999999999999999999999", 413),
        (b"1025", 413),
        (b"-5", 400),
        (b"+5", 400),
        (b"1e3", 400),
        (b"5, 5", 400),
    ],
)
async def test_content_length_is_judged_before_the_body_is_read(
    served: tuple[UnixHTTPServer, list[Request]], length: bytes, status: int
) -> None:
    server, handled = served
    head = b"POST /l HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: " + length + b"\r\n\r\n"
    answer = await answer_then_close(server.path, head)  # the body is never sent
    assert status_of(answer) == status and b"100 Continue" not in answer
    assert refusal(answer)["type"] == "invalid_request_error" and handled == []


async def test_a_head_refused_by_admission_is_answered_without_reading_the_body(
    tmp_path: Path,
) -> None:
    handled: list[Request] = []

    def deny(method: str, path: str, headers: dict[str, str]) -> Response | None:
        return error_response(401, "invalid API key", "invalid_api_key")

    async def record(request: Request) -> Response:
        handled.append(request)
        return Response(200, {"ok": True})

    server = UnixHTTPServer(tmp_path / "s.sock", record, admit=deny)
    await server.start()
    body_size = 32 * 1024 * 1024
    tracemalloc.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(server.path))
        writer.write(b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % body_size)
        async with asyncio.timeout(10):
            answer = await reader.read()  # the 401 arrives, then the server closes
        assert status_of(answer) == 401 and refusal(answer)["code"] == "invalid_api_key"
        # The body cannot follow: nobody reads it any more.
        sent = 0
        block = b"x" * 65536
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            async with asyncio.timeout(10):
                while sent < body_size:
                    writer.write(block)
                    await writer.drain()
                    sent += len(block)
        writer.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await server.close()
    assert sent < body_size and peak < 4 * 1024 * 1024 and handled == []


async def test_a_refused_request_without_a_body_keeps_its_connection(tmp_path: Path) -> None:
    def deny(method: str, path: str, headers: dict[str, str]) -> Response | None:
        return error_response(429, "slow down", "requests", retry_after_s=3)

    server = UnixHTTPServer(tmp_path / "s.sock", echo, admit=deny)
    await server.start()
    try:
        out = await exchange(server.path, b"GET /a HTTP/1.1\r\n\r\n" * 2, reads=2)
    finally:
        await server.close()
    assert out.count(b"HTTP/1.1 429 Too Many Requests") == 2
    assert out.count(b"Retry-After: 3") == 2 and b"Connection: keep-alive" in out


async def test_bodies_held_at_once_share_one_budget(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def hold(request: Request) -> Response:
        if request.path == "/hold":
            await release.wait()
        return Response(200, {"size": len(request.body)})

    server = UnixHTTPServer(tmp_path / "s.sock", hold, max_body_bytes=LIMIT)
    await server.start()
    try:
        holding = asyncio.create_task(
            exchange(
                server.path, b"POST /hold HTTP/1.1\r\nContent-Length: 800\r\n\r\n" + b"a" * 800
            )
        )
        async with asyncio.timeout(10):
            while server.body_bytes_held < 800:
                await asyncio.sleep(0.01)
        busy = await answer_then_close(
            server.path, b"POST /b HTTP/1.1\r\nContent-Length: 300\r\n\r\n"
        )
        chunked = await answer_then_close(
            server.path, CHUNKED_HEAD + b"64\r\n" + b"c" * 100 + b"\r\n12c\r\n"
        )
        release.set()
        assert status_of(await holding) == 200
        after = await exchange(
            server.path, b"POST /b HTTP/1.1\r\nContent-Length: 300\r\n\r\n" + b"b" * 300
        )
    finally:
        release.set()
        await server.close()
    for answer in (busy, chunked):
        assert status_of(answer) == 429 and b"Retry-After: 1" in answer
        assert "still held" in refusal(answer)["message"]
    assert status_of(after) == 200 and b'"size":300' in after
    assert server.body_bytes_held == 0


async def test_connections_beyond_the_cap_are_refused_at_once(tmp_path: Path) -> None:
    server = UnixHTTPServer(tmp_path / "s.sock", echo, max_connections=2)
    await server.start()
    try:
        held = [await asyncio.open_unix_connection(str(server.path)) for _ in range(2)]
        for reader, writer in held:  # each is being served: the server counts it
            writer.write(b"GET /k HTTP/1.1\r\n\r\n")
            async with asyncio.timeout(10):
                assert (await reader.readuntil(b"}")).startswith(b"HTTP/1.1 200")
        answer = await answer_then_close(server.path, b"GET /k HTTP/1.1\r\n\r\n")
        assert status_of(answer) == 429 and "open connections" in refusal(answer)["message"]
        held.pop()[1].close()
        async with asyncio.timeout(10):
            while (
                status_of(await answer_then_close(server.path, b"GET /k HTTP/1.0\r\n\r\n")) != 200
            ):
                await asyncio.sleep(0.01)  # until the server has seen that one close
        for _, writer in held:
            writer.close()
    finally:
        await server.close()


@pytest.mark.parametrize(
    "stall",
    [
        b"POST /s HTTP/1.1\r\nHost: rol",  # a head that never ends
        b"POST /s HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 10,  # a body
        CHUNKED_HEAD + b"64\r\n" + b"x" * 10,
        b"GET /k HTTP/1.1\r\n\r\n",  # then idles on a keep-alive connection
    ],
)
async def test_slow_clients_are_dropped_when_their_time_is_up(tmp_path: Path, stall: bytes) -> None:
    handled: list[Request] = []

    async def record(request: Request) -> Response:
        handled.append(request)
        return await echo(request)

    server = UnixHTTPServer(tmp_path / "s.sock", record, idle_timeout_s=0.2, read_timeout_s=0.2)
    await server.start()
    try:
        answer = await answer_then_close(server.path, stall)  # returns once the server closes
    finally:
        await server.close()
    if stall.startswith(b"GET"):
        assert status_of(answer) == 200 and len(handled) == 1
    else:
        assert answer == b"" and handled == []
    assert server.body_bytes_held == 0


async def test_a_head_trickled_byte_by_byte_still_has_one_deadline(tmp_path: Path) -> None:
    server = UnixHTTPServer(tmp_path / "s.sock", echo, idle_timeout_s=0.3)
    await server.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(server.path))
        closed = asyncio.create_task(reader.read())

        async def trickle() -> None:
            writer.write(b"POST /t HTTP/1.1\r\nX: ")
            with contextlib.suppress(ConnectionError):  # until the server hangs up
                while True:  # a byte every 20 ms: never idle, never done
                    writer.write(b"y")
                    await writer.drain()
                    await asyncio.sleep(0.02)

        trickling = asyncio.create_task(trickle())
        async with asyncio.timeout(10):
            assert await closed == b""
        trickling.cancel()
        writer.close()
    finally:
        await server.close()
