"""`agentroll prime-env-server`: prime-rl's env-server protocol over ZMQ, driven by a client
written from verifiers a60a606 (`verifiers/v1/serve/client.py`, `episode.py`, `trace.py`)
and prime-rl 559b447 (`src/prime_rl/orchestrator/envs.py`, `dispatcher.py`):
`agentroll.testing.prime_env_client`."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.server.tool_handlers import QUESTION, ToolMath

from agentroll.handlers import HandlerRegistry
from agentroll.server.prime_env.server import PrimeEnvServer, backend_for
from agentroll.server.schema import Outcome
from agentroll.server.serving import start_in_loop
from agentroll.testing.prime_env_client import (
    EnvClient,
    EnvServerError,
    branch,
    num_turns,
    reward,
)
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients import AsyncRolloutClient
from agentroll.trainer_clients.errors import NotFound

pytestmark = pytest.mark.integration

SAMPLING = {"temperature": 0.7, "max_tokens": 256}


@asynccontextmanager
async def _env(
    agentroll_server: ServerFactory,
) -> AsyncIterator[tuple[EnvClient, AsyncRolloutClient, str]]:
    """An env server before an agentroll server running `ToolMath`, the orchestrator's
    inference server (scripted) known only from its run requests."""
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=5, wrong_rate=0.0)))
    registry = HandlerRegistry()
    registry.register(ToolMath)
    try:
        async with agentroll_server(registry=registry) as (_, client):
            server = PrimeEnvServer(client, handler="tool-math", address="tcp://127.0.0.1:0")
            serving = asyncio.create_task(server.serve())
            env = EnvClient(server.address)
            try:
                yield env, client, f"{backend.url}/v1"
            finally:
                await env.close()
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
    finally:
        await backend.stop()


async def _until_running(client: AsyncRolloutClient, job_id: str) -> None:
    for _ in range(1200):  # a minute at most
        with contextlib.suppress(NotFound):  # not submitted yet
            if (await client.job(job_id)).state.value == "run":
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{job_id} never ran")


def _task(**fields: Any) -> dict[str, Any]:
    return {"question": QUESTION, "expected_answer": "210", **fields}


async def test_prime_rl_trains_on_the_tokens_agentroll_recorded(
    agentroll_server: ServerFactory,
) -> None:
    async with _env(agentroll_server) as (env, client, inference_url):
        await env.request("health", {}, timeout_s=5)
        episode = await env.run(inference_url, "policy", SAMPLING, _task())
        stored = await client.result(episode["id"])
        backends = await client.backends()
    assert stored is not None and stored.outcome is Outcome.ok
    # The orchestrator's inference server became the job's backend, found by its tag.
    spec = backend_for(inference_url, "policy")
    assert [(b.id, b.tags) for b in backends] == [(spec.id, [spec.id])]
    assert stored.segments[0].backend_id == spec.id
    assert stored.logprobs is not None and stored.logprobs.temperature == 0.7

    assert episode["ok"] is True and episode["errors"] == []
    (trace,) = episode["traces"]
    assert trace["ok"] is True and reward(trace) == stored.reward == 1.0
    assert num_turns(trace) == 2 and episode["task"]["data"] == _task()
    tokens, mask, logprobs = branch(trace)
    last = stored.segments[-1].end
    assert tokens == stored.prompt_ids + stored.response_ids[:last]
    assert mask == [False] * len(stored.prompt_ids) + [bool(m) for m in stored.response_mask[:last]]
    assert logprobs == [0.0] * len(stored.prompt_ids) + [
        lp if m else 0.0
        for lp, m in zip(stored.response_logprobs[:last], stored.response_mask[:last], strict=True)
    ]
    roles = [node["message"]["role"] for node in trace["nodes"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert trace["nodes"][2]["message"]["tool_calls"][0]["name"] == "python"


async def test_failures_reach_prime_rl_as_errors_not_scores(
    agentroll_server: ServerFactory,
) -> None:
    async with _env(agentroll_server) as (env, client, inference_url):
        failed = await env.run(inference_url, "policy", SAMPLING, _task(infra=True))
        wrong = await env.run(inference_url, "policy", SAMPLING, _task(expected_answer="211"))
        with pytest.raises(EnvServerError, match="unknown method 'reset'"):
            await env.request("reset", {}, timeout_s=5)
        with pytest.raises(EnvServerError, match="ValidationError"):
            await env.run(inference_url, "policy", {"temperature": 9.0}, _task())

        # prime-rl gives up on a run (it cancels it): the rollout stops on agentroll too.
        running = asyncio.create_task(
            env.run(inference_url, "policy", SAMPLING, _task(sleep_s=60), request_id="slow")
        )
        await _until_running(client, "prime-slow")
        cancel = await env.request("cancel", {"request_id": "slow"}, timeout_s=5)
        with pytest.raises(EnvServerError, match="Cancelled: rollout aborted"):
            await running
        cancelled = await client.result("prime-slow", wait=30)
    # The infrastructure's fault: an episode that is not ok, its cause, no trace to train.
    assert failed["ok"] is False and failed["traces"] == []
    assert failed["errors"][0]["type"] == "sandbox_lost"
    # The policy's wrong answer: ok, scored 0.
    assert wrong["ok"] is True and reward(wrong["traces"][0]) == 0.0
    assert cancel["cancelled"] is True
    assert cancelled is not None and cancelled.outcome is Outcome.cancelled
