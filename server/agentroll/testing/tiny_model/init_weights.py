"""Run by the engine's interpreter (torch, transformers): a randomly initialised Qwen2.

    python init_weights.py OUT_DIR PARAMS_JSON

OUT_DIR already holds the tokenizer (in `tokenizer/`); this adds `config.json`, the
safetensors weights and `generation_config.json`. Imports nothing from agentroll: the
engine's environment has none.
"""

import json
import sys
from pathlib import Path
from typing import Any


def build(out: Path, params: dict[str, Any]) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(params.pop("seed"))
    config = Qwen2Config(**params, bos_token_id=None, dtype="float32")
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        eos_token_id=params["eos_token_id"], pad_token_id=params["pad_token_id"]
    ).save_pretrained(out)


if __name__ == "__main__":
    build(Path(sys.argv[1]), json.loads(sys.argv[2]))
