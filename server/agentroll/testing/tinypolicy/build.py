"""Build the tiny policy once per recipe: a model directory cached by content.

The key hashes the data recipe, the model shape, the training recipe, the source of every
module that shapes the transcripts or the training (task generator, handlers' prompts, chat
template, tokenizer, scripted rules, this package) and the torch/transformers versions.
Concurrent builders of one key wait on a lock; a build that dies half-way leaves no stamp
and is redone.
"""

import fcntl
import hashlib
import importlib
import inspect
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from agentroll.testing.tinypolicy.data import DataRecipe, collect_transcripts, training_sequences
from agentroll.testing.tinypolicy.train import ModelShape, TrainRecipe, save_model, train

CACHE_ENV = "AGENTROLL_TINYPOLICY_CACHE"
DEFAULT_CACHE = Path("/var/tmp/agentroll-tinypolicy")
STAMP = "agentroll-build.json"
SOURCES = (
    "agentroll.handlers.builtin.arithmetic",
    "agentroll.handlers.builtin.math",
    "agentroll.handlers.builtin.code",
    "agentroll.handlers.builtin.answer_task",
    "agentroll.testing.scripted_llm.template",
    "agentroll.testing.scripted_llm.tokenizer",
    "agentroll.testing.scripted_llm.rules.steps",
    "agentroll.testing.scripted_llm.rules.math",
    "agentroll.testing.scripted_llm.rules.code",
    "agentroll.testing.tinypolicy.data",
    "agentroll.testing.tinypolicy.train",
)
"""Modules whose code decides what the model is trained on and how."""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def build_key(data: DataRecipe, shape: ModelShape, recipe: TrainRecipe) -> str:
    import torch
    import transformers

    digest = hashlib.sha256()
    settings = {"data": asdict(data), "shape": asdict(shape), "train": asdict(recipe)}
    settings["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name in SOURCES:
        digest.update(name.encode())
        digest.update(inspect.getsource(importlib.import_module(name)).encode())
    return digest.hexdigest()[:16]


def build_tiny_policy(
    data: DataRecipe | None = None,
    shape: ModelShape | None = None,
    recipe: TrainRecipe | None = None,
    root: Path | None = None,
) -> Path:
    """The model directory for these recipes, built (transcripts + training) if not cached."""
    data, shape, recipe = data or DataRecipe(), shape or ModelShape(), recipe or TrainRecipe()
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = build_key(data, shape, recipe)
    final = root / f"tinypolicy-{key}"
    with open(root / f"tinypolicy-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / STAMP).is_file():
            return final
        staging = root / f"tinypolicy-{key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        started = time.monotonic()
        sequences = training_sequences(collect_transcripts(data))
        data_s = time.monotonic() - started
        model, log = train(sequences, shape, recipe)
        save_model(model, staging)
        (staging / "training_log.json").write_text(json.dumps(log) + "\n")
        stamp = {"key": key, "data_s": round(data_s, 1), "train_s": log["seconds"]}
        stamp |= {"data": asdict(data), "shape": asdict(shape), "train": asdict(recipe)}
        # The stamp last: a directory without it is a build that did not finish.
        (staging / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        staging.rename(final)
        return final
