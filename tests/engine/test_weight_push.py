"""Weight push into a real vLLM 0.32 CPU engine: after a push it samples from the new weights.

The reference is the same weights in transformers: the engine's sampled-token logprobs must
be what the pushed model gives those tokens (and not what the old model gives them).
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from tests.engine.conftest import EngineAgentroll
from tests.integration.server.test_trajectory import Parrot
from transformers import Qwen2ForCausalLM

from agentroll.handlers import HandlerRegistry
from agentroll.server.engine.vllm_server import SERVED_MODEL_NAME, VLLMServer
from agentroll.server.schema import Outcome
from agentroll.trainer_clients import RolloutClient
from agentroll.trainer_clients.weights import push_weights, update_policy

PROMPT = [17, 230, 1024, 5, 77, 3000, 12, 640]
LOGPROB_ATOL = 2e-3  # float32 on both sides; vLLM's CPU kernels sum in another order


def sample_greedy(engine: VLLMServer, n: int = 12) -> tuple[list[int], list[float]]:
    body = {
        "model": SERVED_MODEL_NAME,
        "prompt": PROMPT,
        "max_tokens": n,
        "temperature": 0,
        "logprobs": 0,
        "return_token_ids": True,
        "ignore_eos": True,
    }
    choice = httpx.post(engine.url + "/v1/completions", json=body, timeout=120).json()["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


@torch.no_grad()
def reference_logprobs(model: Qwen2ForCausalLM, ids: list[int]) -> list[float]:
    """What `model` gives each of `ids` after PROMPT (teacher-forced)."""
    tokens = torch.tensor([PROMPT + ids])
    logits = model(tokens).logits[0, len(PROMPT) - 1 : -1].float()
    picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])
    return picked[:, 0].tolist()


@torch.no_grad()
def perturbed(model: Qwen2ForCausalLM, seed: int) -> Qwen2ForCausalLM:
    generator = torch.Generator().manual_seed(seed)
    for parameter in model.parameters():
        parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= LOGPROB_ATOL for x, y in zip(a, b, strict=True))


@pytest.fixture
def original(vllm_engine: VLLMServer, engine_model_dir: Path) -> Iterator[Qwen2ForCausalLM]:
    """The model the engine started with; put back after the test (the engine is shared)."""
    yield Qwen2ForCausalLM.from_pretrained(engine_model_dir).eval()
    push_weights(vllm_engine.url, "restored", directory=engine_model_dir)


def test_after_a_pushed_state_dict_the_engine_samples_from_the_new_weights(
    vllm_engine: VLLMServer, engine_model_dir: Path, original: Qwen2ForCausalLM
) -> None:
    old_ids, old_lps = sample_greedy(vllm_engine)
    assert close(reference_logprobs(original, old_ids), old_lps)  # control: old weights served

    new = perturbed(Qwen2ForCausalLM.from_pretrained(engine_model_dir).eval(), seed=1)
    push = push_weights(vllm_engine.url, 1, state_dict=new.state_dict())

    assert (push.weight_version, push.prefix_cache_reset) == ("1", True)
    ids, lps = sample_greedy(vllm_engine)
    assert ids != old_ids
    assert close(reference_logprobs(new, ids), lps)
    assert not close(reference_logprobs(original, ids), lps)
    # greedy: each sampled token is the new model's most likely one
    with torch.no_grad():
        logits = new(torch.tensor([PROMPT + ids])).logits[0, len(PROMPT) - 1 : -1]
    best = torch.log_softmax(logits, -1).max(-1).values.tolist()
    assert close(best, lps)
    info = httpx.get(vllm_engine.url + "/weight_info", timeout=30).json()
    assert info == {"weight_version": "1"}


def test_a_saved_directory_pushes_too_and_the_old_weights_come_back(
    vllm_engine: VLLMServer, engine_model_dir: Path, original: Qwen2ForCausalLM, tmp_path: Path
) -> None:
    old_ids, _ = sample_greedy(vllm_engine)
    new = perturbed(Qwen2ForCausalLM.from_pretrained(engine_model_dir), seed=2)
    new.save_pretrained(tmp_path, safe_serialization=True)

    push_weights(vllm_engine.url, "2", directory=tmp_path)
    ids, lps = sample_greedy(vllm_engine)
    assert close(reference_logprobs(new.eval(), ids), lps)

    push_weights(vllm_engine.url, "3", directory=engine_model_dir)
    assert sample_greedy(vllm_engine)[0] == old_ids


def test_a_directory_without_weights_is_refused_before_the_engine_sees_it(
    vllm_engine: VLLMServer, original: Qwen2ForCausalLM, tmp_path: Path
) -> None:
    """vLLM 0.32's engine dies on a reload that finds no weights: never send one."""
    old = sample_greedy(vllm_engine)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"no \*\.safetensors file"):
        push_weights(vllm_engine.url, "4", directory=tmp_path)
    assert sample_greedy(vllm_engine) == old
    info = httpx.get(vllm_engine.url + "/weight_info", timeout=30).json()
    assert info["weight_version"] != "4"  # never labelled with weights it did not load


async def test_update_policy_pauses_pushes_and_resumes_with_the_new_version(
    engine_agentroll: EngineAgentroll,
    vllm_engine: VLLMServer,
    engine_model_dir: Path,
    original: Qwen2ForCausalLM,
) -> None:
    registry = HandlerRegistry()
    registry.register(Parrot)
    greedy = {"temperature": 0.0, "max_tokens": 6}
    async with engine_agentroll(registry=registry) as (server, client):
        job = {"handler": "parrot", "instance": {"words": ["one", "two"]}, "sampling": greedy}
        await client.submit([{"job_id": "before", **job}])
        before = (await client.wait_for(["before"], 300))["before"]

        new = perturbed(Qwen2ForCausalLM.from_pretrained(engine_model_dir).eval(), seed=3)
        sync_client = RolloutClient(server.url, token=server.token)
        try:
            pushes = await asyncio.to_thread(
                update_policy, sync_client, [vllm_engine.url], 1, state_dict=new.state_dict()
            )
        finally:
            sync_client.close()
        assert [p.weight_version for p in pushes] == ["1"]
        assert (await client.status()).paused is False

        await client.submit([{"job_id": "after", **job}])
        after = (await client.wait_for(["after"], 300))["after"]
    assert before.outcome is after.outcome is Outcome.ok
    assert before.policy_versions == [0] and after.policy_versions == [1]
    first = after.segments[0]
    ids = after.response_ids[first.start : first.end]
    with torch.no_grad():
        tokens = torch.tensor([after.prompt_ids + ids])
        logits = new(tokens).logits[0, len(after.prompt_ids) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert close(expected.tolist(), after.response_logprobs[first.start : first.end])
