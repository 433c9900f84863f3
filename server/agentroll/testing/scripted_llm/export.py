"""Write the scripted tokenizer and chat template as a Hugging Face tokenizer directory.

Real SGLang servers report such a directory as `tokenizer_path` in `/get_model_info`; a client
on the same machine can load it to render chat-template deltas itself (SGLang 0.5.2 has no
`/tokenize`). `ScriptedLLMConfig(flavor="sglang", tokenizer_path=str(export_tokenizer(d)))`.
"""

import json
from pathlib import Path

from agentroll.testing.scripted_llm.template import CHATML_TEMPLATE
from agentroll.testing.scripted_llm.tokenizer import EOS_TOKEN, get_tokenizer


def export_tokenizer(directory: str | Path) -> Path:
    """Write `tokenizer.json` and `tokenizer_config.json` into `directory` (created)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokenizer.json").write_text(get_tokenizer().backend.to_str(), encoding="utf-8")
    config = {
        "chat_template": CHATML_TEMPLATE.strip(),
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return root
