"""Turn a policy's reply text into sampled token ids, logprobs and a finish reason.

The ids are deliberately *non-canonical*: some merged BPE tokens are emitted as the two
shorter tokens they were merged from. The bytes are unchanged, so `decode(ids) == text`,
but `encode(decode(ids)) != ids` -- exactly the hazard a token-in/token-out client must
survive (a real model samples non-canonical segmentations too).

Stop handling follows vLLM v1: EOS is checked before `stop_token_ids`; a stop id or EOS
stays in `token_ids` but its text is dropped unless `include_stop_str_in_output`; a stop
string cuts the text, never the ids; nothing stops before `min_tokens`.
"""

import codecs
import math
import random
from dataclasses import dataclass

from agentroll.testing.scripted_llm.logprob_modes import ScriptedLogprobsMode, as_mode
from agentroll.testing.scripted_llm.policy import Reply
from agentroll.testing.scripted_llm.tokenizer import ScriptedTokenizer

LOGPROB_FLOOR = -9999.0
LN2 = math.log(2.0)
FILLER_TEXT = " I will keep writing until I am allowed to stop."


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs_mode: ScriptedLogprobsMode = "raw_logprobs"
    """The server's `--logprobs-mode`, not a request field (vLLM has none)."""
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True


@dataclass(slots=True)
class Sample:
    """One choice. `pieces[i]` is the visible text token i added (before any cut)."""

    token_ids: list[int]
    logprobs: list[float]
    pieces: list[str]
    text_len: int
    finish_reason: str
    stop_reason: int | str | None

    @property
    def text(self) -> str:
        return "".join(self.pieces)[: self.text_len]

    def prefix(self, k: int) -> "Sample":
        """The first `k` tokens as an aborted choice (pause abort, client abort)."""
        pieces = self.pieces[:k]
        return Sample(
            self.token_ids[:k],
            self.logprobs[:k],
            pieces,
            min(self.text_len, sum(map(len, pieces))),
            "abort",
            None,
        )


def logprob_for(u: float, greedy: bool) -> float:
    """A plausible logprob in [-3, -0.001] (greedy: [-1, -0.001]), skewed towards 0."""
    return -(0.001 + (0.999 * u**4 if greedy else 2.999 * u**3))


def noncanonical_ids(
    tok: ScriptedTokenizer, text: str, rng: random.Random, split_rate: float
) -> list[int]:
    """Encode `text`, then split some merged tokens into their two merge parents.
    With `split_rate > 0` at least one token is split whenever any can be."""
    splits = tok.splits
    out: list[int] = []
    kept: list[int] = []  # positions in `out` still holding a splittable token
    did_split = False
    for token_id in tok.encode_cached(text):
        pair = splits.get(token_id)
        if pair is not None and rng.random() < split_rate:
            out.extend(pair)
            did_split = True
            continue
        if pair is not None:
            kept.append(len(out))
        out.append(token_id)
    if split_rate > 0 and kept and not did_split:
        pos = kept[rng.randrange(len(kept))]
        out[pos : pos + 1] = splits[out[pos]]
    return out


def sample(
    tok: ScriptedTokenizer,
    reply: Reply,
    params: SamplingParams,
    rng: random.Random,
    split_rate: float,
) -> Sample:
    """Emit `reply` as tokens under `params` (deterministic given `rng`'s state)."""
    ids = noncanonical_ids(tok, reply.text, rng, split_rate)
    runs_on = params.ignore_eos or not reply.ends_turn
    # EOS and stop ids are masked until `min_tokens` tokens exist, so the model talks on.
    want = params.max_tokens if runs_on else params.min_tokens
    while len(ids) < want:
        ids.extend(noncanonical_ids(tok, FILLER_TEXT, rng, split_rate))
    if not runs_on:
        ids.append(tok.eos_token_id)
    return _walk(tok, ids[: params.max_tokens], params, rng)


def _walk(
    tok: ScriptedTokenizer, ids: list[int], params: SamplingParams, rng: random.Random
) -> Sample:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    special = tok.special_ids if params.skip_special_tokens else frozenset()
    table, texts, ascii_ = tok.token_bytes, tok.token_text, tok.is_ascii
    pending = False  # the UTF-8 decoder holds part of a character
    greedy = params.temperature == 0
    eos = -1 if params.ignore_eos else tok.eos_token_id
    out: list[int] = []
    logprobs: list[float] = []
    pieces: list[str] = []
    text = ""
    check_from = 0  # stop strings only count in text produced after `min_tokens`
    for token_id in ids:
        out.append(token_id)
        logprobs.append(
            as_mode(
                logprob_for(rng.random(), greedy),
                params.logprobs_mode,
                temperature=params.temperature,
                top_k=params.top_k,
                top_p=params.top_p,
            )
        )
        if token_id in special:
            piece = ""
        elif ascii_[token_id] and not pending:
            piece = texts[token_id]
        else:
            piece = decoder.decode(table[token_id])
            pending = bool(decoder.getstate()[0])
        pieces.append(piece)
        if len(out) <= params.min_tokens:
            if params.stop:
                text += piece
                check_from = len(text)
            continue
        if token_id == eos or token_id in params.stop_token_ids:
            text_len = sum(map(len, pieces))
            if not params.include_stop_str_in_output:
                text_len -= len(piece)
            reason = None if token_id == eos else token_id
            return Sample(out, logprobs, pieces, text_len, "stop", reason)
        if params.stop:
            start = len(text)
            text += piece
            for stop in params.stop:
                at = text.find(stop, max(check_from, start - len(stop) + 1))
                if at >= 0:
                    cut = at + len(stop) if params.include_stop_str_in_output else at
                    return Sample(out, logprobs, pieces, cut, "stop", stop)
    return Sample(out, logprobs, pieces, sum(map(len, pieces)), "length", None)


def top_logprobs(
    token_id: int, logprob: float, k: int, vocab_size: int, salt: int
) -> list[tuple[int, float]]:
    """Sampled token first, then the top-`k` alternatives (the sampled one among them
    when it ranks in the top `k`). Alternatives share the remaining probability mass."""
    if k <= 0:
        return [(token_id, logprob)]
    rest = max(1.0 - math.exp(logprob), 1e-300)
    alts: list[tuple[int, float]] = []
    step = 0
    while len(alts) < k:
        step += 1
        alt = (token_id * 7919 + salt * 104_729 + step * 15_485_863) % vocab_size
        if alt != token_id and all(a != alt for a, _ in alts):
            # the j-th alternative gets rest / 2**j, so the masses never exceed 1
            alts.append((alt, max(math.log(rest) - (len(alts) + 1) * LN2, LOGPROB_FLOOR)))
    ranked = sorted([(token_id, logprob), *alts], key=lambda item: -item[1])[:k]
    result = [(token_id, logprob)]
    result.extend(item for item in ranked if item[0] != token_id)
    return result
