"""The tokenizer is a real, deterministic byte-level BPE with Qwen-like special tokens."""

import hashlib
import json
import subprocess
import sys

import pytest

from agentroll.testing.scripted_llm import get_tokenizer
from agentroll.testing.scripted_llm.tokenizer import ADDED_TOKENS, SPECIAL_TOKENS, train_tokenizer

FINGERPRINT = (
    "import hashlib, json; from agentroll.testing.scripted_llm.tokenizer import train_tokenizer; "
    "t = train_tokenizer(); print(json.dumps([t.vocab_size, t.eos_token_id, "
    "hashlib.sha256(t.backend.to_str().encode()).hexdigest()]))"
)


def test_training_twice_gives_identical_ids() -> None:
    first, second = train_tokenizer(), train_tokenizer()
    assert first.backend.to_str() == second.backend.to_str()
    text = 'Solve $3x + 7 = 25$.\n<tool_call>\n{"name": "bash"}\n</tool_call>'
    assert first.encode(text) == second.encode(text)


@pytest.mark.integration
def test_other_processes_train_the_same_tokenizer() -> None:
    """Rust hash maps are seeded per process; the merges must not depend on that."""
    tok = get_tokenizer()
    digest = hashlib.sha256(tok.backend.to_str().encode()).hexdigest()
    mine = [tok.vocab_size, tok.eos_token_id, digest]
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", FINGERPRINT],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            start_new_session=True,
        )
        assert json.loads(out.stdout) == mine


def test_vocabulary_size_and_special_tokens() -> None:
    tok = get_tokenizer()
    assert 3500 <= tok.vocab_size <= 8000
    for token in (*SPECIAL_TOKENS, *ADDED_TOKENS):
        ids = tok.encode(f"a{token}b")
        assert len(ids) == 3 and tok.decode([ids[1]]) == token
    assert tok.decode([tok.eos_token_id]) == "<|im_end|>"
    # special tokens are hidden with skip_special_tokens; <tool_call> is not special
    ids = tok.encode("<|im_start|>x<tool_call><|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "x<tool_call>"


@pytest.mark.parametrize(
    "text",
    ["plain English prose.", "def f(x):\n    return x ** 2\n", "é, 你好, emoji 🙂", "\\frac{1}{2}"],
)
def test_roundtrip_and_own_decoder_matches_library(text: str) -> None:
    tok = get_tokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(ids) == tok.backend.decode(ids, skip_special_tokens=False)


def test_merges_split_into_shorter_tokens_with_the_same_bytes() -> None:
    tok = get_tokenizer()
    assert len(tok.splits) > 3000
    for merged, (left, right) in list(tok.splits.items())[:500]:
        assert tok.token_bytes[left] + tok.token_bytes[right] == tok.token_bytes[merged]
