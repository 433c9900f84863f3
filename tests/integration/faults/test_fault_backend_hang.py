"""An LLM backend that hangs mid-generation (SIGSTOP: it accepts connections and never
answers) is bounded by the request timeout: the rollout retries on another backend, or
ends `infra_error` when there is none. Never reward 0, never a stuck job."""

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.launch import Proc, agentroll_process
from agentroll.server.schema import Outcome
from agentroll.trainer_clients import AsyncRolloutClient

pytestmark = pytest.mark.integration

SETTINGS = {
    "llm_request_timeout_s": 3.0,
    "health_interval_s": 0.5,
    # Every job live at once, however busy the node: the test needs generations in flight on
    # the backend it hangs, not the live limit a busy node would otherwise keep them under.
    "admission": {"live_when_busy": 64},
}


def math_jobs(n: int) -> list[dict[str, Any]]:
    tasks = load_math_tasks()
    return [
        {
            "job_id": f"m{i:02d}",
            "handler": "math",
            "instance": tasks[i % len(tasks)].instance(),
            "sampling": {"seed": i, "max_tokens": 128},
        }
        for i in range(n)
    ]


@contextmanager
def stopped(proc: Proc) -> Iterator[None]:
    """SIGSTOP the backend (by its own pid); always SIGCONT it again."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)


async def in_flight(client: AsyncRolloutClient, backend_id: str) -> int:
    return next(b.in_flight for b in await client.backends() if b.id == backend_id)


async def test_hung_backend_mid_generation_fails_over(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    argv = ["scripted-llm", "--port", "0", "--latency-s", "1.0"]
    with (
        agentroll_process(argv, tmp_path, "victim") as victim,
        agentroll_process(argv, tmp_path, "survivor") as survivor,
    ):
        async with agentroll_server(**SETTINGS) as (_, client):
            await client.add_backend({"id": "victim", "base_url": victim.url})
            await client.add_backend({"id": "survivor", "base_url": survivor.url})
            batch = math_jobs(24)
            await client.submit(batch)
            async with asyncio.timeout(30):
                while await in_flight(client, "victim") < 6:  # generations under way on it
                    await asyncio.sleep(0.02)
            with stopped(victim):
                results = await client.wait_for([j["job_id"] for j in batch], 120)
                view = next(b for b in await client.backends() if b.id == "victim")
                assert not (await client.status()).jobs_by_state  # nothing stuck
    assert {t.outcome for t in results.values()} == {Outcome.ok}
    assert all(t.reward is not None for t in results.values())
    moved = [t for t in results.values() if t.metadata.get("llm_retries")]
    assert moved, "rollouts caught on the hung backend were retried"
    for t in moved:
        retry = t.metadata["llm_retries"][0]
        assert retry["backend"] == "victim" and "timed out" in retry["error"]
        assert {s.backend_id for s in t.segments} == {"survivor"}
    assert not view.healthy and "timed out" in (view.last_error or "")


async def test_only_backend_hangs_then_infra_error_not_reward_zero(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    argv = ["scripted-llm", "--port", "0", "--latency-s", "30"]
    with agentroll_process(argv, tmp_path, "only") as only:
        async with agentroll_server(**SETTINGS) as (_, client):
            await client.add_backend({"id": "only", "base_url": only.url})
            batch = math_jobs(12)
            await client.submit(batch)
            async with asyncio.timeout(30):
                while await in_flight(client, "only") < len(batch):  # all mid-generation
                    await asyncio.sleep(0.02)
            with stopped(only):
                results = await client.wait_for([j["job_id"] for j in batch], 60)
                assert not (await client.status()).jobs_by_state
    for t in results.values():
        assert (t.outcome, t.reward) == (Outcome.infra_error, None)
        assert t.error is not None and t.error.type == "llm_backend_unavailable"
        assert t.error.stage == "run" and "timed out" in t.error.message
