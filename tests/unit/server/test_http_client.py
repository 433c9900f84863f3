"""The backend HTTP client against a hand-written server on a real loopback socket."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentroll.server.llm import BackendError
from agentroll.server.llm.http import MAX_BODY_BYTES, HTTPClient, HTTPTimeout, HTTPTransportError
from agentroll.server.llm.wire import exchange

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    return await reader.readexactly(length)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_keep_alive_reuses_one_connection(serve: Callable[[Handler], Awaitable[str]]) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                break
            reply = b'{"echo": ' + body + b"}"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))
            await writer.drain()
        writer.close()

    url = await serve(handler)
    client = HTTPClient()
    for i in range(5):
        response = await client.request("POST", url + "/x", json_body={"i": i})
        assert (response.status, response.body) == (200, {"echo": {"i": i}})
    assert connections == 1
    await client.close()


async def test_stale_pooled_connection_is_replaced_transparently(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def one_shot(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)  # answer once with keep-alive, then drop the connection
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    url = await serve(one_shot)
    client = HTTPClient()
    assert (await client.request("GET", url)).status == 200
    await asyncio.sleep(0.05)
    assert (await client.request("GET", url)).status == 200  # retried on a fresh connection
    await client.close()


async def test_chunked_body_and_error_status(serve: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'8\r\n{"error"\r\n8\r\n: "bad"}\r\n0\r\n\r\n'
        )
        await writer.drain()
        writer.close()

    client = HTTPClient()
    response = await client.request("POST", await serve(handler), json_body={})
    assert (response.status, response.body) == (400, {"error": "bad"})
    await client.close()


async def test_refused_connection_is_a_transport_error() -> None:
    client = HTTPClient(connect_timeout_s=2)
    with pytest.raises(HTTPTransportError, match="cannot connect"):
        await client.request("GET", "http://127.0.0.1:9/health")
    await client.close()


async def test_timeout_and_cancellation_close_the_connection(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    disconnects = 0

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal disconnects
        await _read_request(reader)
        await reader.read()  # returns when the client closes: that is the abort signal
        disconnects += 1
        writer.close()

    url = await serve(hang)
    client = HTTPClient()
    with pytest.raises(HTTPTimeout):
        await client.request("GET", url, timeout_s=0.1)
    call = asyncio.create_task(client.request("GET", url))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    async with asyncio.timeout(5):
        while disconnects < 2:
            await asyncio.sleep(0.01)
    await client.close()


async def test_garbage_response_is_reported_not_hung(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()
        writer.close()

    client = HTTPClient()
    with pytest.raises(HTTPTransportError, match="not an HTTP"):
        await client.request("GET", await serve(garbage), timeout_s=5)
    await client.close()


def answering(*parts: bytes) -> Handler:
    """A server that reads the request, writes `parts` (a short pause between them), then
    keeps the connection open until the client hangs up."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.05)
        await reader.read()
        writer.close()

    return handler


CHUNKED_200 = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


async def test_a_response_with_a_huge_chunk_is_refused_not_buffered(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(answering(CHUNKED_200 + b"%x\r\n" % (MAX_BODY_BYTES + 1) + b"xyz"))
    client = HTTPClient()
    # Refused from the chunk's size line: long before the (generous) timeout.
    with pytest.raises(BackendError, match="larger than the limit") as info:
        await exchange(client, "POST", url + "/v1/completions", json_body={}, timeout_s=60)
    assert not isinstance(info.value.__cause__, HTTPTimeout)
    await client.close()


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"1" * 200_000, "chunk-size line longer than"),
        (b"-5\r\n", "malformed chunk size"),
        (b"3\r\nabcXY", "not followed by CRLF"),
        (b"2\r\n{}\r\n0\r\n" + b"X-Trailer: y\r\n" * 5000, "trailer section longer than"),
    ],
)
async def test_malformed_or_endless_chunk_framing_is_a_transport_error(
    serve: Callable[[Handler], Awaitable[str]], tail: bytes, why: str
) -> None:
    client = HTTPClient()
    with pytest.raises(HTTPTransportError, match=why):
        await client.request("GET", await serve(answering(CHUNKED_200 + tail)), timeout_s=60)
    await client.close()


async def test_a_body_that_ends_at_close_is_read_whole(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def two_writes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"tokens": ')
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"[1, 2]}")
        await writer.drain()
        writer.close()

    client = HTTPClient()
    response = await client.request("GET", await serve(two_writes), timeout_s=10)
    assert (response.status, response.body) == (200, {"tokens": [1, 2]})
    await client.close()
