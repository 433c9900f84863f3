"""A `keep` pause around a real weight push into vLLM 0.32: every token is stamped with the
version of the weights that sampled it.

vLLM 0.32's `/v1/completions` does not say which weights sampled which tokens, so a call
parked across the update could not be split: agentroll pauses this engine with `abort`, the
tokens sampled before come back (version 0), the turn goes on after resume (version 1). The
referee is transformers: each segment's logprobs are those of its version's weights.
"""

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tests.engine.conftest import EngineAgentroll
from tests.engine.test_weight_push import close, perturbed
from tests.engine.waits import pause_mid_reply
from tests.integration.server.test_trajectory import Parrot
from transformers import Qwen2ForCausalLM

from agentroll.handlers import HandlerRegistry
from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import DEFAULT_POLICY, Outcome, Trajectory
from agentroll.trainer_clients.weights import push_weights

pytestmark = pytest.mark.timeout(900)  # up to TRIES rollouts of long replies on a shared node
JOBS = 2
TRIES = 5
# Seconds of generation, whatever the weights: a pause lands in it (greedy decoding under a
# perturbed model may end a reply at once, and a reply that ended tested nothing).
LONG_REPLY = {"temperature": 0.0, "min_tokens": 3000, "max_tokens": 3000}


@pytest.fixture
def restore_weights(vllm_engine: VLLMServer, engine_model_dir: Path) -> Iterator[None]:
    yield
    push_weights(vllm_engine.url, "restored", directory=engine_model_dir)


@torch.no_grad()
def logprobs_under(model: Qwen2ForCausalLM, t: Trajectory, start: int, end: int) -> list[float]:
    tokens = torch.tensor([t.prompt_ids + t.response_ids[:end]])
    offset = len(t.prompt_ids)
    logits = model(tokens).logits[0, offset + start - 1 : offset + end - 1]
    picked = torch.log_softmax(logits, -1).gather(
        1, torch.tensor(t.response_ids[start:end])[:, None]
    )
    return picked[:, 0].tolist()


async def _kept_rollouts(
    engine_agentroll: EngineAgentroll, engine: VLLMServer, new: Qwen2ForCausalLM, version: int
) -> tuple[dict[str, Trajectory], bool]:
    """JOBS long replies, a `keep` pause once they are with the engine, a push, a resume;
    and whether the push was made (not when the replies ended before one was seen)."""
    registry = HandlerRegistry()
    registry.register(Parrot)
    ids = [f"v{version}-{i}" for i in range(JOBS)]
    async with engine_agentroll(registry=registry) as (_, client):
        jobs = [
            {"job_id": i, "handler": "parrot", "instance": {"words": [i]}, "sampling": LONG_REPLY}
            for i in ids
        ]
        paused = await pause_mid_reply(
            client,
            engine,
            lambda: client.submit(jobs),
            lambda: client.pause("keep", timeout_s=60),
            calls=JOBS,
        )
        if paused is None:
            return await client.wait_for(ids, 300), False  # it tested nothing: run again
        assert (paused.mode, paused.backend_errors) == ("keep", {})
        with contextlib.suppress(TimeoutError):  # the partial answers are in (a call that
            async with asyncio.timeout(30):  # reached the engine after its pause stays)
                while (await client.status()).policies[DEFAULT_POLICY].in_flight:
                    await asyncio.sleep(0.02)
        await asyncio.to_thread(push_weights, engine.url, version, state_dict=new.state_dict())
        await client.resume(policy_version=version)
        return await client.wait_for(ids, 300), True


async def test_keep_around_a_real_push_stamps_each_token_with_its_weights(
    engine_agentroll: EngineAgentroll,
    vllm_engine: VLLMServer,
    engine_model_dir: Path,
    restore_weights: None,
) -> None:
    old = Qwen2ForCausalLM.from_pretrained(engine_model_dir).eval()
    new = perturbed(Qwen2ForCausalLM.from_pretrained(engine_model_dir).eval(), seed=4)
    serving, version = old, 0  # what the engine holds before this try
    for attempt in range(TRIES):  # a pause that came after the replies ended tested nothing
        results, pushed = await _kept_rollouts(engine_agentroll, vllm_engine, new, attempt + 1)
        assert {t.outcome for t in results.values()} == {Outcome.ok}
        for t in results.values():
            assert "mixed_version_segments" not in t.metadata
        spanning = [t for t in results.values() if len(t.policy_versions) == 2]
        if spanning:
            break
        if pushed:
            serving, version = new, attempt + 1
    else:
        pytest.fail(f"no keep pause caught a reply in {TRIES} tries")
    for t in spanning:
        before, after = t.segments[0], t.segments[-1]
        assert (before.policy_version, before.finish_reason) == (version, "abort")
        assert after.policy_version == attempt + 1 and after.start == before.end
        lps = t.response_logprobs
        assert close(
            logprobs_under(serving, t, before.start, before.end), lps[before.start : before.end]
        )
        assert close(logprobs_under(new, t, after.start, after.end), lps[after.start : after.end])
