"""verifiers worker slots: an episode holds its worker while the policy samples, so episodes
wait on slots of their own, and every wait for a slot ends by the request's own timeout with
a clear infra error (`verifiers_workers_busy`), never a hang the rollout pays for. The workers
are `FakeVerifiersWorkers` (the real class's slots, started without an environment)."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.errors import InfraError
from agentroll.testing.fake_verifiers_workers import FakeVerifiersWorkers

PYTHON = Path("/fake/venv/bin/python")
EPISODE = {"op": "episode"}
SCORE = {"op": "score"}
GENEROUS_S = 60.0
"""A bound no answer of a free worker comes near, even on a loaded node."""
SHORT_S = 0.5
"""Waits meant to end by the slot-wait bound: every slot stays held past them, by construction."""


class HeldPolicy:
    """The policy's side of an episode: it takes its turn only once released (its sampling
    held, as a slow backend holds it)."""

    def __init__(self) -> None:
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def __call__(self, turn: list[dict[str, Any]]) -> dict[str, Any]:
        self.asked.set()
        await self.release.wait()
        return {"reply": "7"}


@pytest.fixture
async def workers() -> AsyncIterator[FakeVerifiersWorkers]:
    pool = FakeVerifiersWorkers(size=1)
    try:
        yield pool
    finally:
        await pool.shutdown()


async def held_episode(workers: FakeVerifiersWorkers) -> tuple[HeldPolicy, asyncio.Task[Any]]:
    policy = HeldPolicy()
    task = asyncio.create_task(workers.ask(PYTHON, EPISODE, GENEROUS_S, policy))
    await asyncio.wait_for(policy.asked.wait(), GENEROUS_S)  # the episode holds its worker
    return policy, task


async def test_scoring_completes_while_episodes_hold_every_episode_slot(
    workers: FakeVerifiersWorkers,
) -> None:
    policy, episode = await held_episode(workers)

    # attack: the episode's policy samples slowly; scoring (a tool call, a control) must not
    # queue behind it
    scored = await asyncio.wait_for(workers.ask(PYTHON, SCORE, GENEROUS_S), GENEROUS_S)
    assert scored["ok"] is True
    assert not episode.done()

    # control: the episode itself completes once the policy answers
    policy.release.set()
    assert (await asyncio.wait_for(episode, GENEROUS_S))["ok"] is True


async def test_an_episode_that_cannot_get_a_slot_is_infra_busy_within_its_timeout(
    workers: FakeVerifiersWorkers,
) -> None:
    policy, first = await held_episode(workers)

    with pytest.raises(InfraError) as busy:
        await asyncio.wait_for(workers.ask(PYTHON, EPISODE, SHORT_S, HeldPolicy()), GENEROUS_S)
    assert busy.value.cause == "verifiers_workers_busy"
    assert "busy for 0.5 s" in str(busy.value)

    # control: once the slot is free, the next episode gets it and completes
    policy.release.set()
    assert (await asyncio.wait_for(first, GENEROUS_S))["ok"] is True
    answered = HeldPolicy()
    answered.release.set()
    reply = await asyncio.wait_for(workers.ask(PYTHON, EPISODE, GENEROUS_S, answered), GENEROUS_S)
    assert reply["ok"] is True


async def test_a_request_behind_busy_requests_is_infra_busy_within_its_timeout(
    workers: FakeVerifiersWorkers, tmp_path: Path
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    hold = {"op": "hold", "started": str(started), "release": str(release)}
    holding = asyncio.create_task(workers.ask(PYTHON, hold, GENEROUS_S))
    async with asyncio.timeout(GENEROUS_S):
        while not started.exists():
            await asyncio.sleep(0.05)

    # another door: a scoring request behind a busy tool call waits no longer than its own
    # timeout either
    with pytest.raises(InfraError) as busy:
        await asyncio.wait_for(workers.ask(PYTHON, SCORE, SHORT_S), GENEROUS_S)
    assert busy.value.cause == "verifiers_workers_busy"

    # control: another environment's interpreter has slots of its own
    other = await asyncio.wait_for(
        workers.ask(Path("/other/bin/python"), SCORE, GENEROUS_S), GENEROUS_S
    )
    assert other["ok"] is True

    release.touch()
    assert (await asyncio.wait_for(holding, GENEROUS_S))["ok"] is True
    assert (await asyncio.wait_for(workers.ask(PYTHON, SCORE, GENEROUS_S), GENEROUS_S))["ok"]
