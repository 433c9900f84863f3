"""What one rollout's LLM proxy accepts from its harness, whatever the harness does.

The harness is driven by the policy, so it may flood its proxy: requests as fast as it can
send them, huge bodies, thousands of connections. These caps bound what one rollout can
cost the server (event-loop time, memory, file descriptors), so a flood is the flooding
rollout's own problem: its requests get `429`/`413`, nobody else's. The defaults never
bother an honest harness, which makes one call per turn (a few at once at most) with a
body of a few megabytes at most, even at long contexts. `Settings.llm_proxy` holds the
server's values.
"""

import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from agentroll.server.proxy.http11 import MAX_BODY_BYTES, MAX_CONNECTIONS


class ProxyCaps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        le=MAX_BODY_BYTES,
        description="Largest request body (beyond: 413), and the most request-body bytes one "
        "rollout's proxy holds at once over all its connections (beyond: 429).",
    )
    max_connections: int = Field(
        MAX_CONNECTIONS,
        ge=1,
        le=10_000,
        description="Open connections to one rollout's proxy (beyond: 429).",
    )
    # Parsing a request costs the event loop time (about 70 ms per MiB of JSON): with the body
    # limit, these bound what one rollout can make the server spend, well above what an agent
    # harness asks for (a call per model turn, a few at once).
    request_burst: int = Field(
        30, ge=1, description="Requests one rollout may make at once before its rate applies."
    )
    requests_per_s: float = Field(
        3.0, gt=0, description="Sustained requests per second per rollout (beyond: 429)."
    )


class RequestRate:
    """A token bucket: `burst` requests at once, refilled at `per_s`; O(1) per request."""

    __slots__ = ("_burst", "_clock", "_per_s", "_stamp", "_tokens")

    def __init__(
        self, burst: int, per_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst = float(burst)
        self._per_s = per_s
        self._clock = clock
        self._tokens = self._burst
        self._stamp = clock()

    def wait_s(self) -> float:
        """Spend one request's token: 0.0 when it may go now, else the seconds until a token
        is back (nothing is spent then)."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._per_s)
        self._stamp = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._per_s
