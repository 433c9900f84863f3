"""Rollouts through agentroll against the real engine are exact: every sampled id and logprob
is the engine's own, the chat template is the model's, stops and EOS follow the trajectory
contract, and prefix caching changes nothing."""

import itertools
from pathlib import Path
from typing import Any

from tests.engine.conftest import BACKEND_ID, EngineAgentroll
from tests.engine.engine_handlers import TOOLS, chat_registry
from tests.engine.fidelity import (
    metric,
    render_prompt,
    sampled_mismatches,
    seed_ending_in_eos,
)

from agentroll.server.engine import TOKENIZER_DIR, VLLMServer
from agentroll.server.schema import Trajectory
from agentroll.testing.scripted_llm import get_tokenizer

EOS = get_tokenizer().eos_token_id
CLOSING = get_tokenizer().encode("<|im_end|>\n")
"""What agentroll appends after a turn the model did not close itself."""


async def _rollout(
    engine_agentroll: EngineAgentroll, *, turns: int, sampling: dict[str, Any]
) -> Trajectory:
    job = {"job_id": "j", "handler": "chat-turns", "instance": {"turns": turns}}
    async with engine_agentroll(registry=chat_registry()) as (_, client):
        await client.submit([{**job, "sampling": sampling}])
        t = (await client.wait_for(["j"], 600))["j"]
    assert t.outcome.value == "ok", t.error
    return t


def _turn_spans(t: Trajectory) -> list[tuple[int, int]]:
    """(start, end) of each run of sampled ids in `response_ids`."""
    spans, start = [], None
    for i, m in enumerate([*t.response_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


async def test_a_multi_turn_rollout_is_the_engines_own_with_prefix_caching_on(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer
) -> None:
    assert vllm_engine.enable_prefix_caching
    hits_before = await metric(vllm_engine.url, "vllm:prefix_cache_hits_total")
    t = await _rollout(engine_agentroll, turns=4, sampling={"max_tokens": 32, "seed": 5})
    hits = await metric(vllm_engine.url, "vllm:prefix_cache_hits_total") - hits_before
    assert t.num_turns == 4 and len(_turn_spans(t)) == 4
    # Later turns re-sent the earlier ones as their prompt: the engine served them from cache.
    assert hits > 0
    assert await sampled_mismatches(vllm_engine.url, t) == []
    assert [s.backend_id for s in t.segments] == [BACKEND_ID] * 4
    assert [(s.start, s.end) for s in t.segments] == _turn_spans(t)


async def test_the_chat_template_is_the_models_own(
    engine_agentroll: EngineAgentroll, engine_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    t = await _rollout(engine_agentroll, turns=3, sampling={"max_tokens": 16, "seed": 9})
    hf = AutoTokenizer.from_pretrained(engine_model_dir / TOKENIZER_DIR)
    first = t.messages[:2]
    assert t.prompt_ids == hf.apply_chat_template(
        first, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    # Each observation: the closing tokens the model did not sample, then the template's own
    # rendering of the new user turn and generation prompt (against a fixed probe reply).
    probe = [*first, {"role": "assistant", "content": "ok"}]
    closed = hf.apply_chat_template(probe, tools=TOOLS, tokenize=True, return_dict=False)
    spans = _turn_spans(t)
    for k, ((_, end), (nxt, _)) in enumerate(itertools.pairwise(spans), start=1):
        user = {"role": "user", "content": f"Say something: {k}"}
        full = hf.apply_chat_template(
            [*probe, user],
            tools=TOOLS,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        assert full[: len(closed)] == closed
        observation = t.response_ids[end:nxt]
        new = full[len(closed) :]
        assert observation[-len(new) :] == new
        glue = observation[: -len(new)]
        assert glue == CLOSING[len(CLOSING) - len(glue) :]


async def test_a_stop_string_cuts_the_text_and_keeps_its_token(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer
) -> None:
    t = await _rollout(
        engine_agentroll, turns=2, sampling={"max_tokens": 64, "seed": 3, "stop": ["e"]}
    )
    tokenizer = get_tokenizer()
    (start, end), (nxt, _) = _turn_spans(t)
    assert t.segments[0].finish_reason == "stop"
    sampled_text = tokenizer.decode(t.response_ids[start:end])
    reply = t.messages[2]["content"]
    # The ids keep the token that completed the stop string; the text ends before it.
    assert "e" in tokenizer.decode(t.response_ids[end - 1 : end])
    assert "e" not in reply and sampled_text.startswith(reply)
    # The model did not close its turn: agentroll does, unsampled.
    assert t.response_ids[end : end + len(CLOSING)] == CLOSING
    assert t.response_mask[end : end + len(CLOSING)] == [0] * len(CLOSING)
    assert nxt > end + len(CLOSING)
    assert await sampled_mismatches(vllm_engine.url, t) == []


async def test_a_stop_token_id_is_kept_as_sampled(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer
) -> None:
    # A random-weight model samples nearly uniformly: 64 stop ids end a turn within ~60 tokens.
    stop_ids = list(range(1000, 1064))
    t = await _rollout(
        engine_agentroll,
        turns=1,
        sampling={"max_tokens": 1024, "seed": 4, "stop_token_ids": stop_ids},
    )
    (_, end), *_ = _turn_spans(t)
    assert t.segments[0].finish_reason == "stop"
    assert t.response_ids[end - 1] in stop_ids
    assert await sampled_mismatches(vllm_engine.url, t) == []


async def test_eos_is_kept_as_sampled_and_the_turn_is_not_closed_twice(
    engine_agentroll: EngineAgentroll, vllm_engine: VLLMServer
) -> None:
    system = {"role": "system", "content": "Answer briefly; use the tools if you need to."}
    prompt = await render_prompt(
        vllm_engine.url, [system, {"role": "user", "content": "Say something: 0"}], TOOLS
    )
    seed, reply = await seed_ending_in_eos(vllm_engine.url, prompt, EOS, max_tokens=600)
    t = await _rollout(engine_agentroll, turns=2, sampling={"max_tokens": 600, "seed": seed})
    assert t.prompt_ids == prompt
    (start, end), _ = _turn_spans(t)
    # Exactly what the engine samples for this prompt and seed, EOS included (mask 1) ...
    assert t.response_ids[start:end] == reply and reply[-1] == EOS
    assert t.segments[0].finish_reason == "stop"
    assert "<|im_end|>" not in t.messages[2]["content"]
    # ... so only the rest of the closing tokens is added: never a second <|im_end|>.
    assert t.response_ids[end : end + len(CLOSING) - 1] == CLOSING[1:]
    assert t.response_ids[end] != EOS
    assert await sampled_mismatches(vllm_engine.url, t) == []
