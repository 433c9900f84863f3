"""Reading an HTTP/1.1 message body with its size limit enforced while reading.

Shared by the per-rollout LLM proxy's server (request bodies, written by a harness the
policy drives) and the backend HTTP client (response bodies), each with its own limit. The
rule: nothing is read that would take a body past its limit. A declared Content-Length
over the limit is refused before any of the body is read; a chunk is refused from its size
line, before its data is read; chunk-size lines and the trailer section are bounded; and
malformed framing (a size that is not 1-16 hex digits, a chunk not followed by CRLF) is
refused. A reader that refuses leaves the stream mid-body: the connection must be closed.
"""

import asyncio
import re
from collections.abc import Mapping

from agentroll.server.errors import (
    BodyBudgetSpent,
    BodyError,  # noqa: F401 (re-exported: its old import path)
    BodyTooLarge,
    MalformedBody,
)

MAX_CHUNK_LINE_BYTES = 1024
"""A chunk-size line: the size, optional extensions, CRLF."""
MAX_TRAILER_BYTES = 16 * 1024
"""The trailer section after the last chunk, all lines together."""
READ_SIZE = 64 * 1024
MIN_CHUNKS = 1024
AVERAGE_CHUNK_BYTES = 1024
"""A body may come in `limit / AVERAGE_CHUNK_BYTES` chunks (at least `MIN_CHUNKS`)."""

_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_MAX_LENGTH_DIGITS = 18  # any longer Content-Length is past every limit (and int() is cheap)


class BodyBudget:
    """Body bytes that may be held at once by several readers together (e.g. all the
    connections of one client). A body read against it holds its length until `give`."""

    __slots__ = ("capacity", "held")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0

    def take(self, n: int) -> None:
        if self.held + n > self.capacity:
            raise BodyBudgetSpent(
                f"{self.held} bytes of earlier request bodies are still held; the "
                f"{n} more would exceed {self.capacity} bytes in all"
            )
        self.held += n

    def give(self, n: int) -> None:
        self.held -= n


def is_chunked(headers: Mapping[str, str]) -> bool:
    return "chunked" in headers.get("transfer-encoding", "").lower()


def content_length(value: str) -> int:
    """A Content-Length value: ASCII digits only (no sign, no list, no exponent)."""
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise MalformedBody(f"invalid Content-Length {digits[:40]!r}")
    if len(digits) > _MAX_LENGTH_DIGITS:
        raise BodyTooLarge(f"Content-Length of {len(digits)} digits")
    return int(digits)


def check_length(length: int, limit: int) -> None:
    """Refuse a declared length over `limit` (before any of the body is read)."""
    if length > limit:
        raise BodyTooLarge(f"body of {length} bytes is larger than the limit of {limit} bytes")


def max_chunks(limit: int) -> int:
    """How many chunks a body of at most `limit` bytes may come in: enough for any client
    (they send kilobytes at a time), few enough that tiny chunks cannot turn a body into
    millions of reads and allocations."""
    return max(MIN_CHUNKS, limit // AVERAGE_CHUNK_BYTES)


async def read_chunked(
    reader: asyncio.StreamReader, limit: int, budget: BodyBudget | None = None
) -> bytes:
    """A chunked body of at most `limit` bytes in at most `max_chunks(limit)` chunks. With
    `budget`, each chunk is taken from it before it is read; on success the body holds
    len(body) of it, on failure nothing."""
    body = bytearray()
    received, chunks, most = 0, 0, max_chunks(limit)
    try:
        while True:
            size = await _chunk_size(reader)
            if size == 0:
                await _skip_trailers(reader)
                return bytes(body)
            chunks += 1
            if chunks > most:
                raise BodyTooLarge(f"chunked body in more than {most} chunks")
            if received + size > limit:
                raise BodyTooLarge(f"chunked body is larger than the limit of {limit} bytes")
            if budget is not None:
                budget.take(size)
            received += size
            body += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise MalformedBody("a chunk's data is not followed by CRLF")
    except BaseException:
        if budget is not None:
            budget.give(received)
        raise


async def read_to_close(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A body that ends when the peer closes the connection, of at most `limit` bytes."""
    body = bytearray()
    while data := await reader.read(READ_SIZE):
        if len(body) + len(data) > limit:
            raise BodyTooLarge(f"body is larger than the limit of {limit} bytes")
        body += data
    return bytes(body)


async def _line(reader: asyncio.StreamReader, max_bytes: int, what: str) -> bytes:
    # The stream's own limit bounds what `readuntil` buffers; `max_bytes` is the rule.
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError as exc:
        raise MalformedBody(f"{what} longer than {max_bytes} bytes") from exc
    if len(line) > max_bytes:
        raise MalformedBody(f"{what} longer than {max_bytes} bytes")
    return line


async def _chunk_size(reader: asyncio.StreamReader) -> int:
    line = await _line(reader, MAX_CHUNK_LINE_BYTES, "chunk-size line")
    size = line[:-2].split(b";", 1)[0].rstrip(b" \t")  # extensions are ignored
    if not _CHUNK_SIZE.fullmatch(size):
        raise MalformedBody(f"malformed chunk size {size[:20]!r}")
    return int(size, 16)


async def _skip_trailers(reader: asyncio.StreamReader) -> None:
    seen = 0
    while (line := await _line(reader, MAX_TRAILER_BYTES, "trailer line")) != b"\r\n":
        seen += len(line)
        if seen > MAX_TRAILER_BYTES:
            raise MalformedBody(f"trailer section longer than {MAX_TRAILER_BYTES} bytes")
