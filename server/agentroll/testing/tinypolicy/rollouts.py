"""Rollouts through a real agentroll server, in-process, against any vLLM-protocol backend.

Used for the tiny policy's training transcripts (the scripted backend), its evaluation and
its GRPO loop (the real vLLM engine): the same handlers, templates and bubblewrap sandboxes
a trainer's rollouts get.
"""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agentroll.server.admission import AdmissionSettings
from agentroll.server.api import create_app
from agentroll.server.demo import workdir_settings
from agentroll.server.schema import JobRequest, SamplingParams, Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.trainer_clients import AsyncRolloutClient

ROLLOUT_TIMEOUT_S = 900.0


@asynccontextmanager
async def rollout_client(
    workdir: Path, backend_url: str, *, model: str = "policy"
) -> AsyncIterator[AsyncRolloutClient]:
    """An in-process agentroll server (state in the folder `workdir`, bubblewrap sandboxes) with
    `backend_url` registered as its one backend; a client of it."""
    # Admission reads the node's CPU pressure; beside a CPU engine it would starve us.
    settings = workdir_settings(workdir, admission=AdmissionSettings(enabled=False))
    token_file = settings.token_file
    server = await start_in_loop(create_app(settings))
    try:
        async with AsyncRolloutClient(server.url, token_file=token_file) as client:
            await client.add_backend({"id": "policy-0", "base_url": backend_url, "model": model})
            yield client
    finally:
        await server.stop()


def job(
    job_id: str,
    handler: str,
    instance: dict[str, Any],
    *,
    seed: int | None,
    group_id: str | None = None,
    temperature: float = 1.0,
    max_tokens: int = 256,
) -> JobRequest:
    """One rollout request with the sampling the tiny policy is trained and tested with.

    `seed=None` against vLLM 0.32's CPU engine: a seeded request whose prefill the engine
    splits (many requests at once) stops the engine ("CPU Generator does not use offset").
    """
    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    return JobRequest(
        job_id=job_id, handler=handler, instance=instance, group_id=group_id, sampling=sampling
    )


async def run_jobs(
    client: AsyncRolloutClient, jobs: Sequence[JobRequest], timeout_s: float = ROLLOUT_TIMEOUT_S
) -> list[Trajectory]:
    """Submit `jobs` and return their trajectories in the same order."""
    await client.submit(jobs)
    found = await client.wait_for([j.job_id for j in jobs if j.job_id], timeout_s)
    return [found[j.job_id] for j in jobs if j.job_id]
