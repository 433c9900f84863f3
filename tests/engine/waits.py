"""Catching a rollout's generation call mid-sampling, whatever the node's scheduling.

A pause test needs its pause to land while the engine samples a reply. Polling for that
alone is a race the test can lose: this node type stalls a process for seconds at times,
and a reply that ended during the stall tested nothing. So the engine's sampling processes
are frozen (SIGSTOP) once a call is with them and has had a moment to sample; the pause is
asked for while they are frozen (the engine's API server takes it at once), and they go on
(SIGCONT) once it is under way.
"""

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import DEFAULT_POLICY, JobState, PauseResponse
from agentroll.trainer_clients import AsyncRolloutClient

SAMPLING_S = 0.3
"""How long a reply is sampled before the engine is frozen: a few hundred of its thousands
of tokens (a pause that catches none of them is a try that tested nothing)."""


async def _generating(client: AsyncRolloutClient) -> bool | None:
    """True while a generation call is in flight, None while jobs wait, False once all ended."""
    status = await client.status()
    if status.policies[DEFAULT_POLICY].in_flight >= 1:
        return True
    live = sum(n for s, n in status.jobs_by_state.items() if not JobState(s).terminal)
    return None if live else False


def _descendants(pid: int) -> list[int]:
    """Every live process below `pid` (by each process's parent in /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    below, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        below += children
        frontier = children
    return below


@contextlib.contextmanager
def _frozen(engine: VLLMServer) -> Iterator[None]:
    """The engine's sampling processes stopped (its core and worker, the API server's own
    children); the API server itself keeps answering, so a pause reaches it at once and
    the core carries it out before its next step once it goes on."""
    assert engine.popen is not None
    sampling = _descendants(engine.popen.pid)
    for pid in sampling:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in sampling:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def pause_mid_reply(
    client: AsyncRolloutClient,
    engine: VLLMServer,
    pause: Callable[[], Awaitable[PauseResponse]],
    timeout_s: float = 300.0,
) -> PauseResponse | None:
    """`pause()` while a reply is being sampled; None if every job ended before one was
    caught (a try that tested nothing: run it again)."""
    async with asyncio.timeout(timeout_s):
        while (state := await _generating(client)) is None:
            await asyncio.sleep(0.02)
        if not state:
            return None
        # A moment for it to sample some of the reply. Not the engine's own counter: its API
        # server, sharing the cores with the sampling, may answer /metrics only once the
        # replies have ended.
        await asyncio.sleep(SAMPLING_S)
        with _frozen(engine):
            if not await _generating(client):
                return None  # it ended before the freeze
            asked = asyncio.ensure_future(pause())
            while not (await client.status()).policies[DEFAULT_POLICY].paused:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # for the pause's call to the engine to be sent
        return await asked
