"""An HTTP client that stays fast with thousands of concurrent requests.

One `httpx.AsyncClient` slows down quadratically as concurrency grows: its connection
pool does work proportional to the number of pooled connections and waiters on every
request (benchmarks/http_client.py measures it against this client). We therefore
spread requests over several small clients ("shards"), each with a bounded pool,
opening a new shard only when all are busy.
"""

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class HTTPResponse:
    status: int
    body: Any
    """Decoded JSON, or the raw text when the body is not JSON."""


class _Shard:
    __slots__ = ("client", "in_flight")

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.in_flight = 0


class ShardedHTTPClient:
    def __init__(
        self,
        *,
        per_shard: int = 32,
        max_shards: int = 256,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._per_shard = per_shard
        self._max_shards = max_shards
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._shards: list[_Shard] = []
        self._closed = False

    @property
    def shards(self) -> int:
        return len(self._shards)

    def _pick(self) -> _Shard:
        best = min(self._shards, key=lambda s: s.in_flight, default=None)
        if (best is None or best.in_flight >= self._per_shard) and len(
            self._shards
        ) < self._max_shards:
            limits = httpx.Limits(
                max_connections=self._per_shard, max_keepalive_connections=self._per_shard
            )
            best = _Shard(httpx.AsyncClient(timeout=self._timeout, limits=limits))
            self._shards.append(best)
        assert best is not None
        return best

    async def request(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> HTTPResponse:
        """Send one request; raises `httpx.TransportError` (and subclasses) on transport failure."""
        if self._closed:
            raise RuntimeError("HTTP client is closed")
        shard = self._pick()
        shard.in_flight += 1
        try:
            content = None if json_body is None else json.dumps(json_body).encode()
            headers = {"content-type": "application/json"} if content is not None else None
            response = await shard.client.request(
                method,
                url,
                content=content,
                headers=headers,
                params=params,
                timeout=self._timeout if timeout_s is None else timeout_s,
            )
        finally:
            shard.in_flight -= 1
        try:
            body: Any = json.loads(response.content) if response.content else None
        except ValueError:
            body = response.text
        return HTTPResponse(response.status_code, body)

    async def close(self) -> None:
        self._closed = True
        for shard in self._shards:
            await shard.client.aclose()
        self._shards.clear()
