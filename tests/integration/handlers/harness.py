"""A scripted backend + agentroll server with real bubblewrap sandboxes, for handler tests."""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from tests.conftest import ServerFactory

from agentroll.handlers import HandlerRegistry
from agentroll.runtime import BwrapConfig
from agentroll.server.schema import Trajectory
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import RuleRegistry, ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients import AsyncRolloutClient

POLICY = "echo,swe,code,stem,math"


@asynccontextmanager
async def scripted_backend(
    wrong_rate: float, rules: RuleRegistry | None = None, **config: Any
) -> AsyncIterator[RunningServer]:
    app = create_scripted_app(
        ScriptedLLMConfig(policy=config.pop("policy", POLICY), wrong_rate=wrong_rate, **config),
        rules,
    )
    server = await start_in_loop(app)
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def rollout_service(
    agentroll_server: ServerFactory,
    tmp_path: Path,
    backend: RunningServer,
    registry: HandlerRegistry | None = None,
    **settings: Any,
) -> AsyncIterator[AsyncRolloutClient]:
    settings["sandbox"] = BwrapConfig(state_dir=tmp_path / "sandboxes")
    async with agentroll_server(registry=registry, **settings) as (_, client):
        await client.add_backend({"id": "scripted", "base_url": backend.url})
        yield client


async def run_jobs(
    client: AsyncRolloutClient, jobs: Sequence[dict[str, Any]], timeout_s: float = 90
) -> dict[str, Trajectory]:
    await client.submit(list(jobs))
    return await client.wait_for([j["job_id"] for j in jobs], timeout_s)


async def request_log(backend: RunningServer) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=backend.url) as http:
        return list((await http.get("/scripted/requests")).json()["requests"])
