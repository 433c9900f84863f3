"""A tiny random-init Qwen2 on the scripted tokenizer, for the real engine on CPU.

`build_tiny_model(python)` returns a model folder vLLM serves: the scripted backend's
tokenizer and ChatML template (`export_tokenizer`), so a transcript the scripted backend
produced is token for token the same under this model; 2 layers, hidden 128, 2 heads of
head_dim 64 (vLLM's CPU attention refuses 16), one KV head, tied embeddings (~0.8 M
parameters). Its weights are random: it samples noise, which is all the fidelity tests need.

The tokenizer lives in the model's `tokenizer/` folder, which holds no `config.json`: loaded
from beside a qwen2 `config.json`, transformers 5 swaps the file's pre-tokenizer for Qwen2's
own (digits one by one, ...), and the ids would no longer be the scripted tokenizer's.
`VLLMServer` serves a model's `tokenizer/` folder as its tokenizer where there is one.

Cached by content under the engine cache (`models/tiny-qwen2-<key>/`): the key hashes the
parameters, the tokenizer files and the init script. Built in a private folder and renamed
into place under a lock, so a folder that exists is whole.
"""

import json
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from agentroll.runtime.images.cache import cache_key, held
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout
from agentroll.runtime.images.proc import run_logged
from agentroll.server.engine import (
    TOKENIZER_DIR,
    EngineEnvironment,
    EngineSetupError,
    cache_root,
    ensure_environment,
)
from agentroll.testing.scripted_llm import export_tokenizer
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer

INIT_SCRIPT = Path(__file__).with_name("init_weights.py")
BUILD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class TinyModelParams:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    seed: int = 0


def _init_params(params: TinyModelParams) -> dict[str, object]:
    tokenizer = get_tokenizer()
    return {
        **asdict(params),
        "vocab_size": tokenizer.vocab_size,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.backend.token_to_id("<|endoftext|>"),
    }


def tiny_model_key(params: TinyModelParams) -> str:
    with tempfile.TemporaryDirectory() as tokenizer_dir:
        export_tokenizer(tokenizer_dir)
        files = {p.name: p.read_text() for p in sorted(Path(tokenizer_dir).iterdir())}
    return cache_key(
        "tiny-qwen2",
        {
            "params": json.dumps(_init_params(params), sort_keys=True),
            "init": INIT_SCRIPT.read_text(),
            "tokenizer_dir": TOKENIZER_DIR,
            **files,
        },
    )


async def cached_folder(
    models: Path, name: str, build: Callable[[Path], Awaitable[None]], timeout_s: float
) -> Path:
    """`models/name`, made by `build(work)` in a private folder and renamed into place under a
    lock if missing: a folder that exists is whole, and concurrent builders wait."""
    final = models / name
    async with held(models / ".locks" / f"{name}.lock", timeout_s=timeout_s, what=name):
        if final.is_dir():
            return final
        work = models / ".tmp" / f"{name}.{uuid.uuid4().hex[:8]}"
        try:
            await build(work)
            work.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


async def build_tiny_model(
    python: Path, params: TinyModelParams | None = None, *, root: Path | None = None
) -> Path:
    """The model folder for `params`; if not cached, built with the engine's `python`."""
    params = params or TinyModelParams()
    name = f"tiny-qwen2-{tiny_model_key(params)[:12]}"

    async def build(work: Path) -> None:
        export_tokenizer(work / TOKENIZER_DIR)
        log = work.with_name(f"{work.name}.log")
        try:
            # Bounded and owned: on timeout or cancellation its whole process group is stopped.
            await run_logged(
                [str(python), str(INIT_SCRIPT), str(work), json.dumps(_init_params(params))],
                log_path=log,
                timeout_s=BUILD_TIMEOUT_S,
                what=f"building {name}",
            )
        except (BuildFailed, BuildTimeout) as exc:
            raise EngineSetupError(str(exc)) from None
        finally:
            log.unlink(missing_ok=True)

    return await cached_folder((root or cache_root()) / "models", name, build, BUILD_TIMEOUT_S)


async def prepare_tiny_engine(
    params: TinyModelParams | None = None, *, root: Path | None = None
) -> tuple[EngineEnvironment, Path]:
    """The engine's environment and the tiny model's folder, each made if not cached."""
    environment = await ensure_environment(root)
    return environment, await build_tiny_model(environment.python, params, root=root)


__all__ = [
    "TinyModelParams",
    "build_tiny_model",
    "cached_folder",
    "prepare_tiny_engine",
    "tiny_model_key",
]
