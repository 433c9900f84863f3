"""Catching a rollout's generation call mid-sampling, whatever the node's scheduling.

A pause test needs its pause to land while the engine samples a reply. Polling for that is
a race the test can lose: on this node type every process can go unscheduled for seconds,
most often once the engine has kept both cores busy for a while (seen: 5 s in which neither
the test's process nor a 50 ms monitor loop ran, the engine's long turn ending meanwhile), and
a reply that ended meanwhile tested nothing. So the engine's
sampling processes are frozen (SIGSTOP) before the jobs are submitted, and only thawed for
short slices the test measures: the calls reach the engine's API server (which keeps
answering) and wait there, the reply gets as many tokens as the test wants, and the pause is
asked for while nothing samples. They go on (SIGCONT) once the pause is under way.
"""

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from tests.engine.fidelity import metric

from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import DEFAULT_POLICY, JobState, PauseResponse
from agentroll.trainer_clients import AsyncRolloutClient

TOKENS = "vllm:generation_tokens_total"
SLICE_S = 0.05
"""How long the engine samples between looks: a few dozen of a long reply's thousands of
tokens, so a slice stretched by the node's scheduling still rarely reaches its end."""
SETTLE_S = 0.2
"""For the API server to count the tokens the frozen core had already sent it."""


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


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def _frozen(engine: VLLMServer) -> Iterator[Callable[[], Awaitable[None]]]:
    """The engine's sampling processes stopped (its core and worker, the API server's own
    children) for the block, which gets a coroutine function that lets them sample for one
    slice. The API server itself keeps answering, so calls and a pause reach it at once and
    the core carries them out in order once it goes on."""
    assert engine.popen is not None
    sampling = _descendants(engine.popen.pid)
    assert sampling, "the engine's sampling processes were not found"

    async def one_slice() -> None:
        _signal_all(sampling, signal.SIGCONT)
        try:
            await asyncio.sleep(SLICE_S)
        finally:
            _signal_all(sampling, signal.SIGSTOP)
        await asyncio.sleep(SETTLE_S)

    _signal_all(sampling, signal.SIGSTOP)
    try:
        yield one_slice
    finally:
        _signal_all(sampling, signal.SIGCONT)


async def _in_flight(client: AsyncRolloutClient) -> int | None:
    """The generation calls in flight; None once no job is live (one that failed before its
    call reached the engine: its result says why)."""
    status = await client.status()
    if not any(n for s, n in status.jobs_by_state.items() if not JobState(s).terminal):
        return None
    return status.policies[DEFAULT_POLICY].in_flight


async def pause_mid_reply(
    client: AsyncRolloutClient,
    engine: VLLMServer,
    submit: Callable[[], Awaitable[object]],
    pause: Callable[[], Awaitable[PauseResponse]],
    *,
    calls: int = 1,
    timeout_s: float = 300.0,
) -> PauseResponse | None:
    """`submit()`, then `pause()` once `calls` generation calls are with the engine and their
    replies have some tokens; None if a reply ended before the pause was asked for (a try
    that tested nothing: run it again) or the jobs ended first (their results say why)."""
    async with asyncio.timeout(timeout_s):
        with _frozen(engine) as one_slice:
            before = await metric(engine.url, TOKENS)
            await submit()
            while (in_flight := await _in_flight(client)) is not None and in_flight < calls:
                await asyncio.sleep(0.02)
            while in_flight is not None and await metric(engine.url, TOKENS) == before:
                await one_slice()
            in_flight = await _in_flight(client)
            if in_flight is None or in_flight < calls:
                return None  # the jobs ended (see their results), or a reply within a slice
            asked = asyncio.ensure_future(pause())
            while not (await client.status()).policies[DEFAULT_POLICY].paused:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # for the pause's call to the engine to be sent
        return await asked
