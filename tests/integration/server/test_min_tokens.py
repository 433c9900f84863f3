"""`min_tokens`: a reply is not ended before it, a turn a pause splits owes only the rest, and
no call is ever sent one the engine would refuse (min_tokens > max_tokens)."""

import asyncio

import pytest
from pydantic import ValidationError
from tests.conftest import ServerFactory
from tests.integration.server.test_trajectory import Parrot
from tests.integration.server.test_weight_sync import backend_log, slow_backend

from agentroll.handlers import HandlerRegistry
from agentroll.server.llm.session import call_sampling
from agentroll.server.schema import Outcome, SamplingParams
from agentroll.server.serving import RunningServer

pytestmark = pytest.mark.integration
__all__ = ["slow_backend"]  # the fixture, used by name

LONG = {"min_tokens": 40, "max_tokens": 60, "seed": 1}


def registry() -> HandlerRegistry:
    r = HandlerRegistry()
    r.register(Parrot)
    return r


@pytest.mark.parametrize(
    ("budget", "sampled", "owed"), [(60, 0, 40), (60, 15, 25), (10, 0, 10), (60, 40, None)]
)
def test_a_call_owes_the_rest_of_min_tokens_and_never_more_than_fits(
    budget: int, sampled: int, owed: int | None
) -> None:
    call = call_sampling(LONG, budget, sampled)
    assert (call.get("min_tokens"), call["max_tokens"]) == (owed, budget)


async def test_a_reply_runs_to_min_tokens_across_an_abort_pause(
    agentroll_server: ServerFactory, slow_backend: RunningServer
) -> None:
    async with agentroll_server(registry=registry()) as (_, client):
        await client.add_backend({"id": "b", "base_url": slow_backend.url})
        short = {"job_id": "short", "handler": "parrot", "instance": {"words": ["hi"]}}
        long_job = {"job_id": "long", "handler": "parrot", "instance": {"words": ["ho"]}}
        await client.submit([short, {**long_job, "sampling": LONG}])
        async with asyncio.timeout(30):
            while not (await client.status()).policies["default"].in_flight:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.15)  # into the long reply's 0.4 s of generation
        await client.pause(mode="abort", timeout_s=30)
        await client.resume(policy_version=1)
        done = await client.wait_for(["short", "long"], 60)
    assert {t.outcome for t in done.values()} == {Outcome.ok}
    assert len(done["short"].response_ids) < 40  # the control: the model ends early unforced
    long = done["long"]
    assert len(long.response_ids) >= 40
    first = long.segments[0]
    assert (first.finish_reason, long.segments[-1].finish_reason) == ("abort", "stop")
    owed = {
        len(c["prompt_token_ids"]) - len(long.prompt_ids): c["min_tokens"]
        for c in await backend_log(slow_backend.url)
        if c["prompt_token_ids"][: len(long.prompt_ids)] == long.prompt_ids
    }
    assert owed == {0: 40, first.end: 40 - first.end}  # the split call owed only the rest


def test_min_tokens_above_max_tokens_is_refused_at_submission() -> None:
    with pytest.raises(ValidationError, match=r"min_tokens \(9\) is larger than max_tokens \(8\)"):
        SamplingParams(min_tokens=9, max_tokens=8)
    assert "min_tokens" not in SamplingParams().model_dump()  # unset: the request is unchanged
