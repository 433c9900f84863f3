"""The engine lane's own parts: the cached environment, the tiny model, the owned process."""

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from tests.engine.conftest import BACKEND_ID, EngineAgentroll
from tests.engine.engine_handlers import chat_registry

from agentroll.runtime.locked_venv import STAMP
from agentroll.server.engine import TOKENIZER_DIR, EngineEnvironment, ensure_environment
from agentroll.server.engine.environment import environment_key
from agentroll.server.engine.vllm_server import EngineStartError, VLLMServer
from agentroll.testing.scripted_llm import get_tokenizer
from agentroll.testing.tiny_model import TinyModelParams, build_tiny_model, tiny_model_key


async def test_the_environment_is_installed_once_and_then_reused(
    engine_prepared: tuple[EngineEnvironment, Path],
) -> None:
    environment, _ = engine_prepared
    again = await ensure_environment(environment.root.parent)
    assert again.root == environment.root and not again.installed_now
    assert (again.root / STAMP).read_text().strip() == environment_key()
    assert again.root.name == f"vllm-cpu-{environment_key()[:12]}"


async def test_the_tiny_model_is_content_addressed(
    engine_prepared: tuple[EngineEnvironment, Path],
) -> None:
    environment, model = engine_prepared
    assert model.name == f"tiny-qwen2-{tiny_model_key(TinyModelParams())[:12]}"
    assert await build_tiny_model(environment.python, root=model.parents[1]) == model
    reseeded = TinyModelParams(seed=1)
    assert tiny_model_key(reseeded) != tiny_model_key(TinyModelParams())
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        assert (model / name).is_file(), name
    assert (model / TOKENIZER_DIR / "tokenizer.json").is_file()
    assert not (model / "tokenizer.json").exists()


def test_the_engine_serves_the_scripted_tokenizer(vllm_engine: VLLMServer) -> None:
    text = "Say something: 0 <tool_call> done"
    with httpx.Client(base_url=vllm_engine.url, timeout=60) as http:
        assert http.get("/version").json()["version"] == "0.32.0"
        ids = http.post("/tokenize", json={"model": "policy", "prompt": text}).json()["tokens"]
        # Dev-mode routes are on: agentroll's pause/resume and weight updates need them.
        assert http.get("/is_paused").json() == {"is_paused": False}
    assert ids == get_tokenizer().encode(text)


async def test_a_rollout_through_agentroll_runs_on_the_engine(
    engine_agentroll: EngineAgentroll,
) -> None:
    async with engine_agentroll(registry=chat_registry()) as (_, client):
        await client.submit([{"job_id": "j", "handler": "chat-turns", "instance": {"turns": 2}}])
        t = (await client.wait_for(["j"], 300))["j"]
    assert t.outcome.value == "ok", t.error
    assert t.num_turns == 2 and t.reward is not None
    assert {s.backend_id for s in t.segments} == {BACKEND_ID}
    sampled = [lp for lp, m in zip(t.response_logprobs, t.response_mask, strict=True) if m]
    assert sampled and all(-100.0 < lp <= 0.0 for lp in sampled)


async def test_an_engine_that_cannot_start_says_why_and_leaves_no_process(
    engine_prepared: tuple[EngineEnvironment, Path], tmp_path: Path
) -> None:
    broken = tmp_path / "no-model"
    broken.mkdir()
    engine = VLLMServer(engine_prepared[0].python, broken, tmp_path / "vllm.log")
    with pytest.raises(EngineStartError, match="exited with") as failure:
        async with engine:
            pass
    assert str(tmp_path / "vllm.log") in str(failure.value)
    assert engine.popen is None


def _group_ends(group: int, timeout_s: float = 60.0) -> bool:
    """Whether no process of `group` is left (orphaned workers are reaped by init: polled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_cancelling_a_start_stops_the_engine_and_its_workers(
    engine_prepared: tuple[EngineEnvironment, Path], tmp_path: Path
) -> None:
    log = tmp_path / "vllm.log"
    engine = VLLMServer(engine_prepared[0].python, engine_prepared[1], log)

    async def start_then_cancel() -> int:
        starting = asyncio.create_task(engine.__aenter__())
        # Cancelled once vLLM has forked its engine-core worker into the group.
        async with asyncio.timeout(300):
            while "EngineCore" not in (log.read_text() if log.exists() else ""):
                await asyncio.sleep(0.2)
        assert engine.popen is not None
        group = engine.popen.pid
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        return group

    group = asyncio.run(start_then_cancel())
    assert engine.popen is None
    assert _group_ends(group)
