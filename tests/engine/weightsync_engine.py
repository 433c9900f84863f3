"""A real vLLM CPU engine serving a tiny random-init model, for the weight-push tests.

Session-scoped: one engine (~30 s of a core to start) for every test that asks. Skipped
where the vLLM CPU virtualenv is absent (`AGENTROLL_VLLM_VENV`, default the cached one).
"""

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

VLLM_VENV = Path(os.environ.get("AGENTROLL_VLLM_VENV", "/var/tmp/agentroll-engine-scratch/venv"))
START_TIMEOUT_S = 600.0  # a shared two-core node: start-up is slow, never assumed fast
SERVED_NAME = "policy"


@dataclass(frozen=True)
class Engine:
    url: str
    model_dir: Path
    log: Path


def build_tiny_model(out: Path, seed: int = 0) -> Path:
    """A random-init Qwen2 (2 layers, head_dim 64, tied embeddings) on agentroll's own
    scripted tokenizer, saved as a Hugging Face directory."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentroll.testing.scripted_llm import export_tokenizer
    from agentroll.testing.scripted_llm.tokenizer import get_tokenizer

    export_tokenizer(out)
    tokenizer = get_tokenizer()
    eos = tokenizer.backend.token_to_id("<|im_end|>")
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=tokenizer.vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=eos,
        bos_token_id=None,
        pad_token_id=tokenizer.backend.token_to_id("<|endoftext|>"),
    )
    Qwen2ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"vLLM not healthy after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM CPU virtualenv at {VLLM_VENV}")
    root = tmp_path_factory.mktemp("vllm-engine")
    model = build_tiny_model(root / "model")
    port = _free_port()
    log = root / "engine.log"
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "1",
    }
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(model), "--served-model-name", SERVED_NAME),
        *("--dtype", "float32", "--enforce-eager", "--max-model-len", "4096"),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    with log.open("wb") as out:
        # its own process group: the engine's workers are stopped with it, and only they
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log)
        yield Engine(url, model, log)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
