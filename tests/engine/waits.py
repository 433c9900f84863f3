"""Catching a rollout's generation call mid-sampling, whatever the node's scheduling.

A pause test needs its pause to land while the engine samples a reply. Polling for that
alone is a race the test can lose: this node type stalls a process for seconds at times,
and a reply that ended during the stall tested nothing. So the engine is frozen (SIGSTOP on
its own process group) once a call is with it and it has sampled some of it; the pause is
asked for while it is frozen, and the engine goes on (SIGCONT) once the pause is under way.
"""

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Iterator

from tests.engine.fidelity import metric

from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import DEFAULT_POLICY, JobState, PauseResponse
from agentroll.trainer_clients import AsyncRolloutClient

SAMPLED = "vllm:generation_tokens_total"


async def _generating(client: AsyncRolloutClient) -> bool | None:
    """True while a generation call is in flight, None while jobs wait, False once all ended."""
    status = await client.status()
    if status.policies[DEFAULT_POLICY].in_flight >= 1:
        return True
    live = sum(n for s, n in status.jobs_by_state.items() if not JobState(s).terminal)
    return None if live else False


@contextlib.contextmanager
def _frozen(engine: VLLMServer) -> Iterator[None]:
    assert engine.popen is not None
    group = engine.popen.pid  # the engine runs in a session (and process group) of its own
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


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
        before = await metric(engine.url, SAMPLED)
        while await metric(engine.url, SAMPLED) <= before:  # until it sampled some of it
            if await _generating(client) is False:
                return None
            await asyncio.sleep(0.02)
        with _frozen(engine):
            if not await _generating(client):
                return None  # it ended before the freeze
            asked = asyncio.ensure_future(pause())
            while not (await client.status()).policies[DEFAULT_POLICY].paused:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # for the pause's call to the engine to be sent
        return await asked
