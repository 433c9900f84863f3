"""A single-agent job is byte-for-byte what it was before jobs could declare agents: the
request's idempotency fingerprint and the stored trajectory JSON (key order included; only
the wall-clock `timing` differs between runs).

The goldens in tests/fixtures/golden/ were written by the server as it was before
multi-agent jobs existed (`AGENTROLL_WRITE_GOLDEN=1` writes them again); the trajectory's
since only gained fields the contract added (`logprobs`, each segment's `logprobs_mode`)."""

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.test_trajectory import WORDS, Parrot

from agentroll.handlers import HandlerRegistry
from agentroll.server.fingerprint import request_fingerprint
from agentroll.server.schema import JobRequest
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden"
JOB: dict[str, Any] = {
    "job_id": "golden-1",
    "handler": "parrot",
    "group_id": "g",
    "instance": {"words": WORDS},
    "sampling": {"temperature": 1.0, "max_tokens": 64, "seed": 17},
    "metadata": {"step": 3},
}


def _golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if os.environ.get("AGENTROLL_WRITE_GOLDEN") == "1":
        path.write_text(text)
    return path.read_text()


def _without_timing(raw: str) -> str:
    """The stored JSON with the wall-clock timing blanked; key order is kept."""
    record = json.loads(raw)
    record["timing"] = None
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def test_a_single_agent_request_keeps_its_fingerprint() -> None:
    fingerprint = request_fingerprint(JobRequest.model_validate(JOB))
    assert fingerprint == _golden("single_agent_fingerprint.txt", fingerprint)


async def test_a_single_agent_trajectory_is_byte_for_byte_unchanged(
    agentroll_server: ServerFactory,
) -> None:
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=3)))
    registry = HandlerRegistry()
    registry.register(Parrot)
    try:
        async with agentroll_server(registry=registry) as (server, client):
            await client.add_backend({"id": "b0", "base_url": backend.url})
            await client.submit([JOB])
            await client.wait_for([JOB["job_id"]], 30)
            async with httpx.AsyncClient(
                base_url=server.url, headers=auth_headers(server.url)
            ) as http:
                raw = (await http.get(f"/v1/jobs/{JOB['job_id']}/result")).text
    finally:
        await backend.stop()
    stored = _without_timing(raw)
    assert stored == _golden("single_agent_trajectory.json", stored)
