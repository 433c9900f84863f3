"""Collectors over in-memory fake servers (`agentroll.testing.fake_rollout_server`)."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from agentroll.server.schema import JobRequest, Outcome
from agentroll.testing.fake_rollout_server import FakeRolloutServer, SimulatedRun
from agentroll.trainer_clients import AsyncGroupCollector, AsyncRolloutClient, AsyncServerPool

TEMPLATE = JobRequest(handler="sim", instance={})
QUICK = {"poll_wait_s": 0.05, "health_interval_s": 0.05, "retry_delay_s": 0.01}


def fates(infra: tuple[str, ...] = (), reward: Callable[[str], float] = lambda _: 1.0) -> Any:
    """Every try succeeds in 1 virtual second, except the job ids in `infra`."""

    def simulate(request: JobRequest) -> SimulatedRun:
        job_id = request.job_id or ""
        if job_id in infra:
            return SimulatedRun(Outcome.infra_error, None, 1.0)
        return SimulatedRun(Outcome.ok, reward(job_id), 1.0)

    return simulate


def answer(status: int, body: Any = None, text: str | None = None) -> httpx.Response:
    if text is not None:
        return httpx.Response(status, text=text)
    return httpx.Response(status, json=body if body is not None else {"error": {
        "type": "refused", "message": f"scripted {status}"}})  # fmt: skip


@asynccontextmanager
async def collector_over(
    servers: list[FakeRolloutServer], pool: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[AsyncGroupCollector]:
    clients = [AsyncRolloutClient(s.url, transport=s.transport) for s in servers]
    try:
        async with (
            AsyncServerPool(clients, **{**QUICK, **(pool or {})}) as started,
            AsyncGroupCollector(started, **options) as collector,
        ):
            yield collector
    finally:
        for client in clients:
            await client.close()
