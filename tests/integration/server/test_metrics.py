"""`GET /metrics`: values an operator's dashboard reads, with bounded labels."""

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry
from tests.integration.server.test_trajectory import Parrot

from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient(base_url=url, headers=auth_headers(url)) as http:
        r = await http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


async def test_metrics_follow_jobs_backends_and_pauses(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    registry = make_registry(gates)
    registry.register(Parrot)
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig()))
    try:
        async with agentroll_server(registry=registry, pools={"run": 2}) as (server, client):
            await client.add_backend({"id": "b0", "base_url": backend.url})
            await client.submit([job(f"blocked{i}", block=["run"]) for i in range(5)])
            await client.submit([job("bad", fail={"stage": "init", "kind": "infra"})])
            while (await client.status()).stages["run"].queued < 3:
                await asyncio.sleep(0.01)
            m = await scrape(server.url)
            assert m[("agentroll_stage_busy_workers", (("stage", "run"),))] == 2
            assert m[("agentroll_stage_queue_depth", (("stage", "run"),))] == 3
            assert m[("agentroll_stage_workers", (("stage", "run"),))] == 2
            assert (
                m[
                    (
                        "agentroll_jobs_finished_total",
                        (("handler", "steered"), ("outcome", "infra_error")),
                    )
                ]
                == 1
            )
            assert m[("agentroll_backend_healthy", (("backend", "b0"),))] == 1

            gates.open["run"].set()
            parrot = {"job_id": "p", "handler": "parrot", "instance": {"words": ["a", "b"]}}
            await client.submit([parrot])
            await client.wait_for([f"blocked{i}" for i in range(5)] + ["p"], 30)
            await client.pause()
            await client.resume(policy_version=4)
            m = await scrape(server.url)
    finally:
        await backend.stop()
    assert m[("agentroll_jobs_finished_total", (("handler", "steered"), ("outcome", "ok")))] == 5
    assert m[("agentroll_stage_work_seconds_count", (("stage", "run"),))] == 6
    assert m[("agentroll_llm_request_seconds_count", (("backend", "b0"),))] >= 2
    assert m[("agentroll_llm_tokens_total", (("backend", "b0"), ("direction", "completion")))] > 0
    assert m[("agentroll_policy_version", ())] == 4
    assert m[("agentroll_generation_paused", ())] == 0
    assert m[("agentroll_store_write_seconds_count", ())] >= 1
    labels = {value for _, pairs in m for _, value in pairs}
    assert not labels & {"p", "bad", *(f"blocked{i}" for i in range(5))}  # no job ids as labels
