"""The backend HTTP client against a hand-written server on a real loopback socket."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentroll.server.llm.http import HTTPClient, HTTPTimeout, HTTPTransportError

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
