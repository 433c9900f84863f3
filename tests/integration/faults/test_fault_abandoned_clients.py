"""A slow or vanished trainer: hundreds of SSE consumers and long-polls abandoned mid-wait
leave nothing behind in the server: no tasks, no descriptors, no memory, no per-client
concurrency slots (a trainer that reconnects is served, not refused with 429)."""

import asyncio
import gc
import os
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.faults.fault_handlers import fault_registry, staged_job

pytestmark = pytest.mark.integration

EACH = 100  # connections abandoned per kind
SETTLE_S = 10.0
PER_CLIENT = EACH + 20  # a leftover from any one kind would exhaust the client's slots


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def abandon(host: str, port: int, token: str | None, target: str, read_first: bool) -> int:
    """Send a GET, wait for the response to start (or the handler to park), then vanish.
    Returns the number of tasks in this loop (server included) just before vanishing."""
    reader, writer = await asyncio.open_connection(host, port)
    head = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
    writer.write(head.encode())
    await writer.drain()
    if read_first:
        async with asyncio.timeout(10):
            await reader.readuntil(b"\r\n\r\n")  # SSE headers: the stream is open
    else:
        await asyncio.sleep(0.5)  # the request is in its handler, waiting
    tasks = len(asyncio.all_tasks())
    writer.transport.abort()  # RST, no goodbye
    return tasks


async def settled(baseline_tasks: int, baseline_fds: int) -> tuple[int, int]:
    give_up = asyncio.get_running_loop().time() + SETTLE_S
    while True:
        tasks, open_fds = len(asyncio.all_tasks()), fds()
        if tasks <= baseline_tasks and open_fds <= baseline_fds:
            return tasks, open_fds
        if asyncio.get_running_loop().time() > give_up:
            return tasks, open_fds
        await asyncio.sleep(0.1)


async def test_abandoned_streams_and_long_polls_leave_nothing_behind(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    async with agentroll_server(registry=fault_registry(), max_requests_per_client=PER_CLIENT) as (
        server,
        client,
    ):
        await client.submit([staged_job("live", hold=["run"], gate=str(gate))])
        await client.submit([staged_job(f"done{i}") for i in range(5)])
        await client.wait_for([f"done{i}" for i in range(5)], 30)
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        await client.status()  # the client's own connection is open before the baseline
        gc.collect()
        base_tasks, base_fds, base_rss = len(asyncio.all_tasks()), fds(), rss_mb()

        for _ in range(2):  # twice: growth would show as a second step up
            for target, read_first in (
                ("/v1/results/stream?after=0", True),  # consumer vanishes mid-stream
                ("/v1/results/stream?after=5", True),  # ... while waiting for news
                ("/v1/results?after=5&wait=120", False),  # long-poll abandoned mid-wait
                ("/v1/jobs/live/result?wait=120", False),
            ):
                peaks = await asyncio.gather(
                    *(
                        abandon(host, int(port), server.token, target, read_first)
                        for _ in range(EACH)
                    )
                )
                if not read_first:  # ours (one each) + the server's: really parked in a wait
                    assert max(peaks) >= base_tasks + 2 * EACH
            await asyncio.sleep(0.5)
            tasks, open_fds = await settled(base_tasks, base_fds)
            assert tasks <= base_tasks, f"{tasks - base_tasks} server tasks left behind"
            assert open_fds <= base_fds, f"{open_fds - base_fds} descriptors left behind"
            status = await client.status()  # not 429: no concurrency slot is still held
            assert status.jobs_by_state == {"run": 1}
        gc.collect()
        assert rss_mb() - base_rss < 20  # 800 abandoned requests cost no lasting memory
        gate.unlink()
        assert (await client.wait_for(["live"], 30))["live"].reward == 1.0
