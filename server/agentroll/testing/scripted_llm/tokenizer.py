"""A real byte-level BPE tokenizer, trained at start-up on the bundled corpus.

Training is deterministic (same merges and ids in every process) and takes well under a
second, so nothing binary is committed: `corpus.txt` is the source of truth. The special
tokens mirror Qwen2.5: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (EOS) are special;
`<tool_call>`, `</tool_call>`, `<think>`, `</think>` are single added (non-special) tokens.
"""

import functools
import json
from importlib import resources

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<think>", "</think>")
EOS_TOKEN = "<|im_end|>"
TARGET_VOCAB_SIZE = 8000  # an upper bound: the corpus yields about 4,000 tokens


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by the ByteLevel pieces."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class ScriptedTokenizer:
    """The trained `tokenizers.Tokenizer` plus the per-id tables the sampler needs."""

    def __init__(self, backend: Tokenizer) -> None:
        self.backend = backend
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.eos_token_id: int = self._id(EOS_TOKEN)
        self.im_start_id: int = self._id("<|im_start|>")
        self.endoftext_id: int = self._id("<|endoftext|>")
        self.special_ids: frozenset[int] = frozenset(self._id(t) for t in SPECIAL_TOKENS)
        self.added_ids: frozenset[int] = self.special_ids | {self._id(t) for t in ADDED_TOKENS}
        unicode_to_byte = {c: b for b, c in _byte_to_unicode().items()}
        self.pieces: list[str] = [str(backend.id_to_token(i)) for i in range(self.vocab_size)]
        # Raw bytes per id: what a byte-level decoder concatenates.
        self.token_bytes: list[bytes] = [
            piece.encode() if i in self.added_ids else bytes(unicode_to_byte[c] for c in piece)
            for i, piece in enumerate(self.pieces)
        ]
        # Each id decoded on its own (partial UTF-8 shows as U+FFFD, as in vLLM's token strings).
        self.token_text: list[str] = [b.decode("utf-8", "replace") for b in self.token_bytes]
        self.is_ascii: list[bool] = [b.isascii() for b in self.token_bytes]
        self.splits: dict[int, tuple[int, int]] = self._merge_table()
        self._cache: dict[str, tuple[int, ...]] = {}

    def _id(self, token: str) -> int:
        token_id = self.backend.token_to_id(token)
        if token_id is None:
            raise KeyError(token)
        return int(token_id)

    def _merge_table(self) -> dict[int, tuple[int, int]]:
        """merged id -> (left id, right id): the BPE merge that created it."""
        merges = json.loads(self.backend.to_str())["model"]["merges"]
        table: dict[int, tuple[int, int]] = {}
        for merge in merges:
            left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
            merged = self._id(left + right)
            table.setdefault(merged, (self._id(left), self._id(right)))
        return table

    def encode(self, text: str) -> list[int]:
        """Canonical ids; special/added tokens written in `text` become their single ids."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def encode_cached(self, text: str) -> tuple[int, ...]:
        """`encode` memoised: scripted replies repeat, and encoding is a hot-path cost."""
        ids = self._cache.get(text)
        if ids is None:
            if len(self._cache) >= 4096:
                self._cache.clear()
            ids = self._cache[text] = tuple(self.encode(text))
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        table = self.token_bytes
        if skip_special_tokens:
            special = self.special_ids
            data = b"".join(table[i] for i in ids if i not in special)
        else:
            data = b"".join(table[i] for i in ids)
        return data.decode("utf-8", "replace")

    def is_valid_id(self, token_id: int) -> bool:
        return 0 <= token_id < self.vocab_size


def train_tokenizer() -> ScriptedTokenizer:
    """Train a fresh tokenizer (deterministic); prefer the cached `get_tokenizer()`."""
    corpus = resources.files(__package__).joinpath("corpus.txt").read_text(encoding="utf-8")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    backend.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    # Added after training so they sit at the end of the vocabulary, as in Qwen.
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return ScriptedTokenizer(backend)


@functools.cache
def get_tokenizer() -> ScriptedTokenizer:
    """The process-wide tokenizer, trained on first use."""
    return train_tokenizer()
