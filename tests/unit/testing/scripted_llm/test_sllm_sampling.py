"""Reply text -> sampled ids: non-canonical segmentation, EOS, stops, logprobs."""

import random

import pytest

from agentroll.testing.scripted_llm import Reply, get_tokenizer
from agentroll.testing.scripted_llm.sampling import (
    LOGPROB_FLOOR,
    SamplingParams,
    noncanonical_ids,
    sample,
    top_logprobs,
)

TEXT = "The sum of the first $n$ positive integers is $\\frac{n(n+1)}{2}$. The answer is 210."


def _sample(text: str = TEXT, seed: int = 1, ends_turn: bool = True, **params: object):
    params.setdefault("max_tokens", 500)
    return sample(
        get_tokenizer(),
        Reply(text, ends_turn),
        SamplingParams(**params),
        random.Random(seed),
        split_rate=0.15,
    )


@pytest.mark.parametrize("seed", range(5))
def test_ids_decode_to_the_text_but_are_not_canonical(seed: int) -> None:
    tok = get_tokenizer()
    ids = noncanonical_ids(tok, TEXT, random.Random(seed), split_rate=0.15)
    assert tok.decode(ids) == TEXT
    assert tok.encode(tok.decode(ids)) != ids
    assert len(ids) > len(tok.encode(TEXT))


def test_even_a_low_split_rate_splits_one_token() -> None:
    tok = get_tokenizer()
    ids = noncanonical_ids(tok, "The answer", random.Random(0), split_rate=1e-9)
    assert tok.encode(tok.decode(ids)) != ids
    assert noncanonical_ids(tok, "The answer", random.Random(0), 0.0) == tok.encode("The answer")


def test_normal_turn_ends_with_eos_and_text_hides_it() -> None:
    tok = get_tokenizer()
    s = _sample()
    assert s.token_ids[-1] == tok.eos_token_id
    assert (s.finish_reason, s.stop_reason) == ("stop", None)
    assert s.text == TEXT
    assert len(s.logprobs) == len(s.token_ids)
    assert all(-3.0 <= lp <= -0.001 for lp in s.logprobs)


@pytest.mark.parametrize("text", ["naïve café, 你好 🙂", "ü" * 40])
def test_multibyte_text_survives_split_tokens(text: str) -> None:
    s = _sample(text, seed=3)
    assert s.text == text
    assert "".join(s.pieces) == text  # incremental decoding never emits U+FFFD here


def test_eos_text_is_dropped_even_without_skip_special_tokens() -> None:
    # vLLM v1 drops the stop token's text unless include_stop_str_in_output
    assert _sample(skip_special_tokens=False).text == TEXT
    assert _sample(skip_special_tokens=False, include_stop_str_in_output=True).text == (
        TEXT + "<|im_end|>"
    )


def test_max_tokens_truncates_without_eos() -> None:
    tok = get_tokenizer()
    s = _sample(max_tokens=5)
    assert len(s.token_ids) == 5 and tok.eos_token_id not in s.token_ids
    assert (s.finish_reason, s.stop_reason) == ("length", None)
    assert s.token_ids == _sample().token_ids[:5]


def test_stop_token_id_is_reported_and_kept() -> None:
    full = _sample().token_ids
    target = full[3]
    s = _sample(stop_token_ids=frozenset({target}))
    assert s.token_ids == full[: full.index(target) + 1]
    assert (s.finish_reason, s.stop_reason) == ("stop", target)


def test_eos_listed_as_stop_id_still_reports_null() -> None:
    tok = get_tokenizer()
    s = _sample(stop_token_ids=frozenset({tok.eos_token_id}))
    assert (s.finish_reason, s.stop_reason) == ("stop", None)


def test_stop_string_cuts_text_not_ids() -> None:
    s = _sample(stop=("integers",))
    assert s.text == "The sum of the first $n$ positive "
    assert (s.finish_reason, s.stop_reason) == ("stop", "integers")
    assert get_tokenizer().decode(s.token_ids).endswith("integers")
    kept = _sample(stop=("integers",), include_stop_str_in_output=True)
    assert kept.text == "The sum of the first $n$ positive integers"


def test_min_tokens_and_ignore_eos_keep_the_model_talking() -> None:
    tok = get_tokenizer()
    short = _sample("Hi.", min_tokens=30)
    # EOS is masked for the first 30 tokens; the model finishes its sentence, then stops
    assert len(short.token_ids) > 30 and short.token_ids[-1] == tok.eos_token_id
    assert short.token_ids.count(tok.eos_token_id) == 1
    assert short.text.startswith("Hi.")
    runaway = _sample("Hi.", ignore_eos=True, max_tokens=40)
    assert len(runaway.token_ids) == 40 and runaway.finish_reason == "length"
    rambling = _sample("Hi.", ends_turn=False, max_tokens=12)
    assert len(rambling.token_ids) == 12 and tok.eos_token_id not in rambling.token_ids


def test_same_rng_state_same_sample_and_prefix_for_abort() -> None:
    a, b = _sample(seed=9), _sample(seed=9)
    assert (a.token_ids, a.logprobs) == (b.token_ids, b.logprobs)
    assert _sample(seed=10).logprobs != a.logprobs
    part = a.prefix(4)
    assert part.token_ids == a.token_ids[:4] and part.finish_reason == "abort"
    assert part.stop_reason is None and TEXT.startswith(part.text)


def test_top_logprobs_put_the_sampled_token_first() -> None:
    top = top_logprobs(42, -0.2, 3, 3000, salt=7)
    assert top[0] == (42, -0.2) and len(top) == 3  # sampled token ranks first: k entries
    low = top_logprobs(42, -2.9, 3, 3000, salt=7)
    assert low[0] == (42, -2.9) and len(low) == 4  # sampled + top-3
    assert all(LOGPROB_FLOOR <= lp < 0 for _, lp in low)
    assert [lp for _, lp in low[1:]] == sorted((lp for _, lp in low[1:]), reverse=True)
    assert top_logprobs(42, -0.2, 0, 3000, salt=7) == [(42, -0.2)]
