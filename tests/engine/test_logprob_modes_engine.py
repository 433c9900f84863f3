"""Logprob semantics and routed experts against the real engine (vLLM 0.32's CPU build).

With temperature != 1, a rollout's logprobs are checked against the engine's own
recomputation (prompt logprobs, which vLLM reports raw in every mode): the session engine
(default `raw_logprobs`) gives the plain log-softmax; a second server on the same tiny model,
started with `--logprobs-mode processed_logprobs`, gives the log-softmax at the job's
temperature. Neither registration says which: agentroll learns it from the server.
"""

import json
import math
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.engine.conftest import EngineAgentroll
from tests.engine.engine_handlers import chat_registry
from tests.engine.fidelity import LOGPROB_TOLERANCE, sampled_mismatches

from agentroll.server.engine import TOKENIZER_DIR, EngineEnvironment, EngineStartError, VLLMServer
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.scripted_llm import export_tokenizer, get_tokenizer

TEMPERATURE = 0.7
JOB = {
    "job_id": "lp",
    "handler": "chat-turns",
    "instance": {"turns": 2},
    "sampling": {"temperature": TEMPERATURE, "max_tokens": 8, "seed": 11},
}


async def _rollout(start: Callable[..., Any]) -> Trajectory:
    async with start(registry=chat_registry()) as (_, client):
        await client.submit([JOB])
        t: Trajectory = (await client.wait_for([JOB["job_id"]], 600))[JOB["job_id"]]
    assert t.outcome is Outcome.ok, t.error
    return t


def _sampled(t: Trajectory) -> list[tuple[int, int, float]]:
    """(position in prompt + response, token, logprob) of each sampled token."""
    offset = len(t.prompt_ids)
    return [
        (offset + i, token, lp)
        for i, (token, lp, m) in enumerate(
            zip(t.response_ids, t.response_logprobs, t.response_mask, strict=True)
        )
        if m
    ]


async def _full_distributions(url: str, t: Trajectory) -> list[dict[str, Any] | None]:
    """The engine's raw logprobs over the whole vocabulary at every position."""
    body = {
        "model": "policy",
        "prompt": t.prompt_ids + t.response_ids,
        "max_tokens": 1,
        "prompt_logprobs": -1,
    }
    async with httpx.AsyncClient(timeout=600) as http:
        answer = (await http.post(url + "/v1/completions", json=body)).json()
    entries: list[dict[str, Any] | None] = answer["choices"][0]["prompt_logprobs"]
    return entries


def _log_softmax_at(raw: dict[str, Any], token: int, temperature: float) -> float:
    scaled = {int(k): v["logprob"] / temperature for k, v in raw.items()}
    top = max(scaled.values())
    return scaled[token] - top - math.log(sum(math.exp(v - top) for v in scaled.values()))


@pytest.fixture(scope="module")
def processed_engine(
    engine_prepared: tuple[EngineEnvironment, Path],
    engine_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[VLLMServer]:
    """The session's model once more, in processed mode, with whole-vocabulary logprobs."""
    log = tmp_path_factory.mktemp("vllm-processed") / "vllm.log"
    flags = ["--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]
    with VLLMServer(
        engine_prepared[0].python, engine_model_dir, log, extra_args=flags, nice=5
    ) as engine:
        yield engine


async def test_raw_logprobs_are_the_engines_plain_log_softmax(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer
) -> None:
    t = await _rollout(engine_agentroll)
    assert t.logprobs is not None
    assert t.logprobs.model_dump() == {
        "mode": "raw_logprobs",
        "temperature": TEMPERATURE,
        "top_p": 1.0,
        "top_k": -1,
    }
    assert {s.logprobs_mode for s in t.segments} == {"raw_logprobs"}
    assert len(_sampled(t)) > 2 and await sampled_mismatches(vllm_engine.url, t) == []
    assert t.routed_experts is None  # a dense model, served without routed-experts capture


async def test_processed_logprobs_are_the_engines_at_the_jobs_temperature(
    agentroll_server: ServerFactory, processed_engine: VLLMServer
) -> None:
    @asynccontextmanager
    async def start(**kwargs: Any) -> AsyncIterator[Any]:
        async with agentroll_server(**kwargs) as (server, client):
            await client.add_backend({"id": "processed", "base_url": processed_engine.url})
            yield server, client

    t = await _rollout(start)
    assert t.logprobs is not None and t.logprobs.mode == "processed_logprobs"
    assert t.logprobs.temperature == TEMPERATURE
    distributions = await _full_distributions(processed_engine.url, t)
    sampled = _sampled(t)
    assert len(sampled) > 2
    for position, token, lp in sampled:
        raw = distributions[position]
        assert raw is not None and len(raw) == get_tokenizer().vocab_size
        assert lp == pytest.approx(_log_softmax_at(raw, token, TEMPERATURE), abs=LOGPROB_TOLERANCE)
    # ... and they are not the raw ones: only the declaration tells a trainer which it got
    assert any(
        abs(lp - (distributions[position] or {})[str(token)]["logprob"]) > 10 * LOGPROB_TOLERANCE
        for position, token, lp in sampled
    )


def build_tiny_moe(out: Path) -> Path:
    """A random-init Qwen3-MoE (8 experts, top 2) on the scripted tokenizer, laid out as the
    engine lane's models are (the tokenizer in its own folder)."""
    torch = pytest.importorskip("torch", reason="building the MoE model needs torch")
    transformers = pytest.importorskip("transformers", reason="and transformers")
    export_tokenizer(out / TOKENIZER_DIR)
    tok = get_tokenizer()
    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(
        vocab_size=tok.vocab_size, hidden_size=128, intermediate_size=256,
        moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
        bos_token_id=None, pad_token_id=tok.backend.token_to_id("<|endoftext|>"),
    )  # fmt: skip
    transformers.Qwen3MoeForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": tok.eos_token_id}))
    return out


async def test_the_cpu_build_cannot_return_routed_experts_but_serves_the_moe_model(
    engine_prepared: tuple[EngineEnvironment, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.32 wires routed-experts capture to Model Runner V2 only, which needs Triton; the
    CPU build has neither and refuses the flag at start-up, whichever runner is asked for.
    The control: the same MoE model serves without the flag, answering `routed_experts: null`.
    The wire path is covered against the scripted backend; if this starts failing, the CPU
    build gained the feature and the routing checks belong here."""
    python, model = engine_prepared[0].python, build_tiny_moe(tmp_path / "moe")
    refusals = {
        "0": "AuxOutput Connector requires Model Runner V2",
        "1": "Model Runner V2 requires Triton",
    }
    for runner_v2, refusal in refusals.items():
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", runner_v2)
        log = tmp_path / f"routed-{runner_v2}.log"
        flags = ["--enable-return-routed-experts"]
        with pytest.raises(EngineStartError, match=refusal):
            async with VLLMServer(python, model, log, extra_args=flags, nice=5):
                pass
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    async with VLLMServer(python, model, tmp_path / "moe.log", nice=5) as engine:
        body = {"model": "policy", "prompt": [10, 20, 30], "max_tokens": 4, "seed": 1}
        async with httpx.AsyncClient(timeout=300) as http:
            choice = (await http.post(engine.url + "/v1/completions", json=body)).json()["choices"][
                0
            ]
    assert len(choice["text"]) > 0 and choice["routed_experts"] is None
