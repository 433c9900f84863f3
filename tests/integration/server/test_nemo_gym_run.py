"""`agentroll nemo-gym-agent`: NeMo Gym's `POST /run`, driven as NeMo RL drives its agents.

The client (`agentroll.testing.nemo_gym_client`) is written from NeMo Gym 07d6b0d
(`nemo_gym/rollout_collection.py`, `base_resources_server.py`, `openai_utils.py`) and NeMo RL
7ea279a (`nemo_rl/environments/nemo_gym.py`, `nemo_rl/experience/failures.py`).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.server.tool_handlers import QUESTION, TOOLS, ToolMath

from agentroll.handlers import HandlerRegistry
from agentroll.server.nemo_gym_agent import create_agent_app
from agentroll.server.schema import Outcome
from agentroll.server.serving import start_in_loop
from agentroll.testing import nemo_gym_client
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients import AsyncRolloutClient

pytestmark = pytest.mark.integration


def _row(**fields: Any) -> dict[str, Any]:
    return {
        "agent_ref": {"name": "agentroll_agent"},
        "responses_create_params": {
            "input": [{"role": "user", "content": QUESTION}],
            "tools": TOOLS,
            "temperature": 0.7,
            "max_output_tokens": 256,
        },
        "question": QUESTION,
        "expected_answer": "210",
        "_rowidx": 3,
        **fields,
    }


@asynccontextmanager
async def nemo_gym_front(
    agentroll_server: ServerFactory,
) -> AsyncIterator[tuple[str, AsyncRolloutClient]]:
    """A NeMo Gym agent front before an agentroll server running `ToolMath`."""
    backend = await start_in_loop(create_scripted_app(ScriptedLLMConfig(seed=5, wrong_rate=0.0)))
    registry = HandlerRegistry()
    registry.register(ToolMath)
    try:
        async with agentroll_server(registry=registry) as (_, client):
            await client.add_backend({"id": "b0", "base_url": backend.url})
            front = await start_in_loop(create_agent_app(client, handler="tool-math", timeout_s=60))
            try:
                yield front.url, client
            finally:
                await front.stop()
    finally:
        await backend.stop()


async def test_nemo_rl_trains_on_exactly_the_tokens_agentroll_recorded(
    agentroll_server: ServerFactory,
) -> None:
    async with nemo_gym_front(agentroll_server) as (url, client):
        result = await nemo_gym_client.run(url, _row())
        job_id = result["agentroll"]["job_id"]
        stored = await client.result(job_id)
    assert stored is not None and stored.outcome is Outcome.ok
    assert stored.reward == result["reward"] == 1.0
    assert stored.logprobs is not None and stored.logprobs.temperature == 0.7  # the row's

    log = nemo_gym_client.message_log(result)
    assert [m["role"] for m in log] == ["user", "assistant"] * 2
    last = stored.segments[-1].end
    rebuilt = [t for m in log for t in m["token_ids"]]
    assert rebuilt == stored.prompt_ids + stored.response_ids[:last]
    sampled = [lp for m in log if m["role"] == "assistant" for lp in m["generation_logprobs"]]
    assert sampled == [
        lp for lp, keep in zip(stored.response_logprobs, stored.response_mask, strict=True) if keep
    ]

    # Readable items around the tokens, the row echoed as NeMo Gym's verify response does.
    output = result["response"]["output"]
    assert [item["type"] for item in output] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "function_call",
    ]
    assert output[1]["name"] == "python" and output[2]["call_id"] == output[1]["call_id"]
    assert output[2]["output"] == "210\n"
    assert output[4]["name"] == "submit" and output[4]["arguments"] == '{"answer": "210"}'
    assert (
        result["_rowidx"] == 3
        and result["responses_create_params"] == _row()["responses_create_params"]
    )


async def test_failures_reach_nemo_rl_as_what_they_are(agentroll_server: ServerFactory) -> None:
    async with nemo_gym_front(agentroll_server) as (url, _):
        # The infrastructure's fault: a 5xx NeMo RL retries, never a 200 with reward 0.
        with pytest.raises(nemo_gym_client.RunFailed) as infra:
            await nemo_gym_client.run(url, _row(infra=True))
        assert infra.value.status == 502 and "sandbox_lost" in str(infra.value)
        assert nemo_gym_client.http_status_is_infra(infra.value.status)

        # The policy's own wrong answer is scored: 200 with reward 0.
        wrong = await nemo_gym_client.run(url, _row(expected_answer="211"))
        assert wrong["reward"] == 0.0 and wrong["agentroll"]["outcome"] == "ok"

        # A row agentroll cannot take is the row's fault: a 4xx that is not retried.
        nested: dict[str, Any] = {}
        for _ in range(40):
            nested = {"deeper": nested}
        for bad_row in (_row(deep=nested), {"agent_ref": {"name": "a"}, "question": "?"}):
            with pytest.raises(nemo_gym_client.RunFailed) as data:
                await nemo_gym_client.run(url, bad_row)
            assert data.value.status == 422
            assert not nemo_gym_client.http_status_is_infra(data.value.status)
