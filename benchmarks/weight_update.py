"""Seconds per weight update into a running vLLM 0.32 CPU engine, per method.

Methods (docs/protocol.md §7.5):
- `state dict, /dev/shm`: `push_weights(state_dict=...)`: safetensors in shared memory, then
  the engine's in-place `reload_weights` (`/collective_rpc`), prefix-cache reset, version.
- `state dict, disk`: the same through a file on local disk (/var/tmp).
- `saved directory`: `push_weights(directory=...)` of a `save_pretrained` folder (nothing to
  write; tied heads get a small view).
- `weight transfer API`: `/start_weight_update` ... `/finish_weight_update`; its backends are
  NCCL and CUDA IPC, so the CPU engine refuses it (reported, not timed).

One engine per model size; `--sizes` picks the models (hidden size x layers).

    .venv/bin/python benchmarks/weight_update.py [--updates 5] [--sizes 128x2,512x4]
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch
from transformers import Qwen2ForCausalLM

from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.testing.tiny_model import TinyModelParams, prepare_tiny_engine
from agentroll.trainer_clients.weights import push_weights, save_weights


def params_of(size: str) -> TinyModelParams:
    hidden, layers = (int(x) for x in size.split("x"))
    return TinyModelParams(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=1,
        head_dim=64,
    )


def weight_transfer_api(url: str) -> str:
    response = httpx.post(url + "/start_weight_update", timeout=60)
    if response.status_code == 200:
        httpx.post(url + "/finish_weight_update", json={}, timeout=60)
        return "accepted"
    return f"refused ({response.status_code}): {response.text[:160]}"


def measure(engine: VLLMServer, model_dir: Path, updates: int) -> dict[str, list[float]]:
    model = Qwen2ForCausalLM.from_pretrained(model_dir)
    state = model.state_dict()
    times: dict[str, list[float]] = {"state dict, /dev/shm": [], "state dict, disk": []}
    times["saved directory"] = []
    times["  of which engine reload"] = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as disk:
        for k in range(updates):
            began = time.perf_counter()
            push = push_weights(engine.url, f"shm-{k}", state_dict=state)
            times["state dict, /dev/shm"].append(time.perf_counter() - began)
            times["  of which engine reload"].append(push.load_s)
            began = time.perf_counter()
            save_weights(state, disk)
            push_weights(engine.url, f"disk-{k}", directory=disk)
            times["state dict, disk"].append(time.perf_counter() - began)
            began = time.perf_counter()
            push_weights(engine.url, f"dir-{k}", directory=model_dir)
            times["saved directory"].append(time.perf_counter() - began)
    return times


async def run(sizes: list[str], updates: int, logs: Path) -> None:
    for size in sizes:
        environment, model_dir = await prepare_tiny_engine(params_of(size))
        n = sum(p.numel() for p in Qwen2ForCausalLM.from_pretrained(model_dir).parameters())
        print(f"model {size} (hidden x layers): {n / 1e6:.1f} M parameters, float32")
        async with VLLMServer(environment.python, model_dir, logs / f"vllm-{size}.log") as engine:
            times = await asyncio.to_thread(measure, engine, model_dir, updates)
            print(f"  {'weight transfer API':<28} {weight_transfer_api(engine.url)}")
        for method, values in times.items():
            print(
                f"  {method:<28} median {statistics.median(values):7.3f} s  "
                f"max {max(values):7.3f} s  ({len(values)} updates)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--sizes", default="128x2", help="comma-separated HIDDENxLAYERS")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as logs:
        asyncio.run(run(args.sizes.split(","), args.updates, Path(logs)))


if __name__ == "__main__":
    main()
