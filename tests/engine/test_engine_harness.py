"""An unmodified harness (mini-swe-agent) in a bubblewrap sandbox, its calls going through
agentroll's recording proxy to the real engine: the rollout ends scored, every recorded
chain is the engine's own sampling, and every prompt is the model's own chat template."""

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.engine.conftest import BACKEND_ID, MODEL_ENV, EngineAgentroll
from tests.engine.fidelity import chain_mismatches, sampled_mismatches

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.runtime import BwrapConfig
from agentroll.server.engine import TOKENIZER_DIR, VLLMServer
from agentroll.server.schema import Outcome, Trajectory

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
    pytest.mark.skipif(
        importlib.util.find_spec("minisweagent") is None,
        reason="mini-swe-agent is not installed (make setup installs it)",
    ),
    pytest.mark.skipif(
        MODEL_ENV in os.environ,
        reason="expects the random-weight model: a trained policy may call the harness's tool",
    ),
]

STEPS = 3
"""mini-swe-agent's own limit of consecutive format errors (its default), also set as its
step limit: a random-weight model never calls its tool, so the harness stops itself there."""


def _job() -> dict[str, Any]:
    return {
        "job_id": "mini",
        "handler": "harness",
        "instance": {
            "harness": {
                "type": "mini_swe_agent",
                "mode": "toolcall",
                "step_limit": STEPS,
                "timeout_s": 400,
            },
            "evaluator": "swe",
            "task": load_swe_tasks()[0].instance,
            # Short, so three turns of the harness's own prompts fit the engine's context.
            "instruction": "Fix slugify in textkit/slug.py.",
        },
        "sampling": {"seed": 11, "max_tokens": 24},
        "limits": {"run_timeout_s": 450},
    }


def _user_messages(text: str) -> list[dict[str, str]]:
    """The user turns of a ChatML text made of whole `user` turns only."""
    turns = text.split("<|im_end|>\n")
    assert turns[-1] == "" and all(t.startswith("<|im_start|>user\n") for t in turns[:-1])
    return [{"role": "user", "content": t.removeprefix("<|im_start|>user\n")} for t in turns[:-1]]


def _assert_prompts_are_the_models_template(t: Trajectory, model_dir: Path) -> None:
    """Each call's prompt is the model's chat template over the harness's conversation (the
    opening messages, then one format-error message per earlier call: mini-swe-agent drops a
    reply without a tool call from its history, so each call starts a chain of its own)."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(model_dir / TOKENIZER_DIR)

    def render(messages: list[Any], generation_prompt: bool) -> list[int]:
        ids: list[int] = hf.apply_chat_template(
            messages,
            tools=t.tools,
            add_generation_prompt=generation_prompt,
            tokenize=True,
            return_dict=False,
        )
        return ids

    opening = t.messages[:2]
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant"]
    assert t.prompt_ids == render(opening, True)
    # The answer the harness read is the model tokenizer's own text for the sampled ids.
    assert t.messages[2]["content"] == hf.decode(t.response_ids[: t.segments[0].end])
    before = render(opening, False)
    generation_prompt = render(opening, True)[len(before) :]
    for k, chain in enumerate(t.chains or [], start=1):
        prompt = chain.prompt_ids
        assert prompt[: len(before)] == before and prompt[-len(generation_prompt) :] == (
            generation_prompt
        )
        added = _user_messages(hf.decode(prompt[len(before) : -len(generation_prompt)]))
        # The harness read the proxy's answer: cut by the token budget, no tool call.
        assert len(added) == k and all("finish_reason=length" in m["content"] for m in added)
        assert prompt == render([*opening, *added], True)


@pytest.mark.timeout(900)
async def test_mini_swe_agent_against_the_engine_is_scored_and_exact(
    engine_agentroll: EngineAgentroll,
    vllm_engine: VLLMServer,
    engine_model_dir: Path,
    tmp_path: Path,
) -> None:
    sandbox = BwrapConfig(state_dir=tmp_path / "sandboxes")
    async with engine_agentroll(sandbox=sandbox) as (_, client):
        await client.submit([_job()])
        t = (await client.wait_for(["mini"], 560))["mini"]
    # A random-weight model fixes nothing, but the rollout is the policy's own doing: scored.
    assert t.outcome in (Outcome.ok, Outcome.agent_error), (t.outcome, t.error)
    assert t.reward == 0.0 and t.reward_info["resolved"] is False
    # Noise holds no tool call: the harness gives up after its third format error in a row.
    assert t.metadata["harness"]["exit_status"] == "RepeatedFormatError"
    proxy = t.metadata["llm_proxy"]
    chains = proxy["chains"]
    # One chain per call, in call order, each ended by the next call's rewritten history.
    assert proxy["calls"] == proxy["num_chains"] == STEPS
    assert [(c["calls"], c["main"]) for c in chains] == [([0], True), ([1], False), ([2], False)]
    assert [(c["broken"] or {}).get("reason") for c in chains] == [
        "history_rewritten",
        "history_rewritten",
        None,
    ]
    assert proxy["sampled_tokens"] == sum(c["sampled_tokens"] for c in chains) == 3 * 24
    assert t.num_turns == 1 and [s.backend_id for s in t.segments] == [BACKEND_ID]
    # Every chain's sampled ids and logprobs are what the engine computes for them.
    assert await sampled_mismatches(vllm_engine.url, t) == []
    # The other chains are samples of their own: the loop going on after each rewrite.
    assert [(c.index, c.kind) for c in t.chains or []] == [(1, "continuation"), (2, "continuation")]
    for chain in t.chains or []:
        assert await chain_mismatches(vllm_engine.url, chain) == []
    _assert_prompts_are_the_models_template(t, engine_model_dir)
