"""Build the tiny policy once per recipe: a model folder cached by content.

It starts from the engine's random-init tiny model (`agentroll.testing.tiny_model`, same
folder layout: the scripted tokenizer in `tokenizer/`), collects the recipe's transcripts
through agentroll and trains on them. Transcripts are kept beside the models
(`tiny-policy-data-<key>.json`): policies trained longer or shorter on one recipe collect
them once. The key hashes the random-init model's own key, the data and training recipes,
the source of every module that shapes the transcripts or the training (task generator,
handlers' prompts, chat template, tokenizer, scripted rules, this package) and the
torch/transformers versions. Built in a private folder and renamed into place under a lock,
so a folder that exists is whole; concurrent builders wait.
"""

import asyncio
import importlib
import inspect
import json
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from agentroll.runtime.images.cache import cache_key
from agentroll.server.engine import cache_root
from agentroll.testing.tiny_model import TinyModelParams, build_tiny_model, cached_folder
from agentroll.testing.tinypolicy.data import (
    DataRecipe,
    Sequence,
    collect_transcripts,
    training_sequences,
)
from agentroll.testing.tinypolicy.synth import with_synthetic
from agentroll.testing.tinypolicy.train import TrainRecipe, train

POLICY_PARAMS = TinyModelParams(num_hidden_layers=4, intermediate_size=512)
"""4 layers (copying a question into code takes attention over attention), ~1.5 M params."""
POLICY_RECIPE = TrainRecipe()
"""The policy that earns reward: copying new numbers takes ~100,000 sequences (about 17
minutes on two idle cores), more than a CI run should spend on every change of its sources."""
LANE_RECIPE = TrainRecipe(steps=300, batch_size=32, learning_rate=3e-3)
"""The policy the engine lane serves: it has learnt the protocol (call `python`, read its
output, `submit`) but rarely the copying; about 2 minutes."""
BUILD_TIMEOUT_S = 3600.0
"""How long to wait for another process building the same policy (minutes on a busy node)."""
TRAINING_SOURCE = "agentroll.testing.tinypolicy.train"
"""How the model is trained: part of the policy's key, not of its transcripts'."""
SOURCES = (
    "agentroll.handlers.builtin.math.arithmetic",
    "agentroll.handlers.builtin.math.handler",
    "agentroll.handlers.builtin.code.handler",
    "agentroll.handlers.agent.final_answer",
    "agentroll.testing.scripted_llm.template",
    "agentroll.testing.scripted_llm.tokenizer",
    "agentroll.testing.scripted_llm.rules.steps",
    "agentroll.testing.scripted_llm.rules.math",
    "agentroll.testing.scripted_llm.rules.code",
    "agentroll.testing.tinypolicy.data",
    "agentroll.testing.tinypolicy.synth",
    TRAINING_SOURCE,
)
"""Modules whose code decides what the model is trained on and how."""


def _sources() -> dict[str, str]:
    return {name: inspect.getsource(importlib.import_module(name)) for name in SOURCES}


def policy_key(init: Path, data: DataRecipe, recipe: TrainRecipe) -> str:
    import torch
    import transformers

    inputs = {
        "init": init.name,
        "recipes": json.dumps({"data": asdict(data), "train": asdict(recipe)}, sort_keys=True),
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
    }
    return cache_key("tiny-policy", inputs | _sources())


async def _sequences(data: DataRecipe, models: Path) -> tuple[list[Sequence], float]:
    """The recipe's training sequences; the seconds collecting took. The rollouts run once
    per recipe and code (several policies, e.g. a short and a long training, share them);
    the written questions are cheap and made on each build."""
    rollouts = {k: v for k, v in asdict(data).items() if k != "synthetic_arithmetic"}
    shaping = {k: v for k, v in _sources().items() if k != TRAINING_SOURCE}
    key = cache_key("tiny-policy-data", {"data": json.dumps(rollouts)} | shaping)
    path = models / f"tiny-policy-data-{key[:12]}.json"
    started = time.monotonic()
    if path.is_file():
        real = [Sequence(**s) for s in json.loads(path.read_text())]
    else:
        real = training_sequences(await collect_transcripts(data))
        staged = path.with_suffix(f".{uuid.uuid4().hex[:8]}")
        staged.write_text(json.dumps([asdict(s) for s in real]))
        staged.rename(path)
    return with_synthetic(real, data.synthetic_arithmetic), time.monotonic() - started


async def build_tiny_policy(
    python: Path,
    data: DataRecipe | None = None,
    recipe: TrainRecipe | None = None,
    *,
    params: TinyModelParams = POLICY_PARAMS,
    root: Path | None = None,
) -> Path:
    """The trained policy's folder; built (random init with the engine's `python`,
    transcripts, training) if not cached. `training.json` in it logs the build."""
    data, recipe = data or DataRecipe(), recipe or POLICY_RECIPE
    init = await build_tiny_model(python, params, root=root)
    models = (root or cache_root()) / "models"
    name = f"tiny-policy-{policy_key(init, data, recipe)[:12]}"

    async def build(work: Path) -> None:
        sequences, data_s = await _sequences(data, models)
        model, log = await asyncio.to_thread(train, sequences, init, recipe)
        shutil.copytree(init, work)
        model.save_pretrained(work, safe_serialization=True)
        log |= {"data_s": round(data_s, 1), "data": asdict(data), "train": asdict(recipe)}
        (work / "training.json").write_text(json.dumps(log) + "\n")

    return await cached_folder(models, name, build, BUILD_TIMEOUT_S)
