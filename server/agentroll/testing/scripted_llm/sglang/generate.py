"""SGLang's `POST /generate` on the shared engine, sampler and policy (docs/protocol.md §9.1).

Same samples as the vLLM flavor for the same prompt and seed; only the wire differs:
`output_ids`, `meta_info.output_token_logprobs` as `[logprob, id, text|null]`, and
`meta_info.finish_reason` objects (`{"type": "stop", "matched": id|str}`, `{"type": "length",
"length": n}`, `{"type": "abort", ...}`). Requests arriving while paused are held. Streaming
is not simulated (400).
"""

import random
import time
import uuid
from array import array
from typing import Any

from starlette.responses import Response

from agentroll.testing.scripted_llm.common import json_response, version_ranges
from agentroll.testing.scripted_llm.engine import Engine, Run
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.generation import (
    check_prompt_ids,
    check_stop_strings,
    generate,
    prompt_digest,
)
from agentroll.testing.scripted_llm.sampling import (
    LOGPROB_FLOOR,
    Sample,
    SamplingParams,
    logprob_for,
    top_logprobs,
)
from agentroll.testing.scripted_llm.sglang.protocol import (
    GenerateRequest,
    SGLangSamplingParams,
    parse,
    sampling_params,
)


def check_context(prompt_len: int, max_new_tokens: int | None, limit: int) -> int:
    """SGLang's two checks; both leave one position free (`>=`, not `>`; read in the
    source, not observed: docs/protocol.md §8.2). None means "up to the context length"."""
    if prompt_len >= limit:
        raise ProtocolError(
            f"The input ({prompt_len} tokens) is longer than the model's context length "
            f"({limit} tokens)."
        )
    if max_new_tokens is None:
        return limit - prompt_len - 1
    if max_new_tokens < 0:
        raise ProtocolError(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
    total = prompt_len + max_new_tokens
    if total >= limit:
        raise ProtocolError(
            f"Requested token count exceeds the model's maximum context length of {limit} "
            f"tokens. You requested a total of {total} tokens: {prompt_len} tokens from the "
            f"input messages and {max_new_tokens} tokens for the completion. Please reduce the "
            "number of tokens in the input messages or the completion to fit within the limit."
        )
    return max_new_tokens


def _params(engine: Engine, sp: SGLangSamplingParams, prompt_len: int) -> SamplingParams:
    if sp.temperature < 0:
        raise ProtocolError(f"temperature must be non-negative, got {sp.temperature}.")
    if not 0 < sp.top_p <= 1:
        raise ProtocolError(f"top_p must be in (0, 1], got {sp.top_p}.")
    if sp.n < 1:
        raise ProtocolError(f"n must be at least 1, got {sp.n}.")
    max_new = check_context(prompt_len, sp.max_new_tokens, engine.config.max_model_len)
    stop = (sp.stop,) if isinstance(sp.stop, str) else tuple(sp.stop or ())
    check_stop_strings(engine, stop)
    return SamplingParams(
        max_tokens=max_new,
        temperature=sp.temperature,
        stop=tuple(s for s in stop if s),
        stop_token_ids=frozenset(sp.stop_token_ids or ()),
        include_stop_str_in_output=sp.no_stop_trim,
        ignore_eos=sp.ignore_eos,
        min_tokens=min(sp.min_new_tokens, max_new),
        skip_special_tokens=sp.skip_special_tokens,
    )


def _prompts(engine: Engine, req: GenerateRequest) -> tuple[list[list[int]], bool]:
    """(prompts, batched). Exactly one of `text` / `input_ids`."""
    if (req.text is None) == (req.input_ids is None):
        raise ProtocolError("Either text or input_ids should be provided.")
    if req.text is not None:
        texts = [req.text] if isinstance(req.text, str) else req.text
        prompts = [engine.tokenizer.encode(t) for t in texts]
        batched = not isinstance(req.text, str)
    else:
        raw: Any = req.input_ids
        batched = bool(raw) and isinstance(raw[0], list)
        prompts = [list(p) for p in raw] if batched else [list(raw)]
    for ids in prompts:
        check_prompt_ids(engine, ids)
    return prompts, batched


def finish_reason(s: Sample, eos_id: int) -> dict[str, Any]:
    if s.finish_reason == "length":
        return {"type": "length", "length": len(s.token_ids)}
    if s.finish_reason == "abort":
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    matched = eos_id if s.stop_reason is None else s.stop_reason
    return {"type": "stop", "matched": matched}


def _logprob_fields(
    engine: Engine, req: GenerateRequest, prompt: list[int], s: Sample
) -> dict[str, Any]:
    tok = engine.tokenizer
    with_text = req.return_text_in_logprobs

    def entry(lp: float | None, token_id: int) -> list[Any]:
        return [lp, token_id, tok.token_text[token_id] if with_text else None]

    lps = [max(lp, LOGPROB_FLOOR) for lp in s.logprobs]
    fields: dict[str, Any] = {
        "input_token_logprobs": [],
        "output_token_logprobs": [entry(lp, t) for lp, t in zip(lps, s.token_ids, strict=True)],
    }
    if req.logprob_start_len >= 0:
        rng = random.Random(f"prompt:{prompt_digest(prompt)}")
        fields["input_token_logprobs"] = [
            entry(None if pos == 0 else logprob_for(rng.random(), greedy=False) * 2, t)
            for pos, t in enumerate(prompt)
            if pos >= req.logprob_start_len
        ]
    if req.top_logprobs_num > 0:
        regular = tok.vocab_size - len(tok.added_ids)
        fields["output_top_logprobs"] = [
            [entry(v, i) for i, v in top_logprobs(t, lp, req.top_logprobs_num, regular, pos)]
            for pos, (t, lp) in enumerate(zip(s.token_ids, lps, strict=True))
        ]
        fields["input_top_logprobs"] = []
    return fields


def _item(
    engine: Engine, req: GenerateRequest, rid: str, prompt: list[int], s: Sample, latency: float
) -> dict[str, Any]:
    new_api = engine.config.sglang_version == "0.5.23"
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason(s, engine.tokenizer.eos_token_id),
        "prompt_tokens": len(prompt),
        "completion_tokens": len(s.token_ids),
        "cached_tokens": 0,
    }
    if new_api:
        meta["reasoning_tokens"] = 0
        meta["num_retractions"] = 0
    meta["weight_version"] = engine.weight_version
    meta["e2e_latency"] = round(latency, 6)
    if req.return_logprob:
        meta.update(_logprob_fields(engine, req, prompt, s))
        if new_api:
            meta["output_token_logprobs_length"] = len(s.token_ids)
    return {"text": s.text, "output_ids": s.token_ids, "meta_info": meta}


def _record(engine: Engine, rid: str, index: int, prompt: list[int], s: Sample, run: Run) -> None:
    engine.stats["generation_tokens"] += len(s.token_ids)
    engine.stats[f"finished:{s.finish_reason}"] += 1
    engine.record(
        {
            "id": rid,
            "index": index,
            "created": int(time.time()),
            "prompt_token_ids": array("i", prompt),
            "token_ids": array("i", s.token_ids),
            "logprobs": array("d", s.logprobs),
            "text": s.text,
            "finish_reason": s.finish_reason,
            "stop_reason": s.stop_reason,
            "weight_versions": version_ranges(engine, run, len(s.token_ids)),
        }
    )


async def create_generation(engine: Engine, body: Any) -> Response:
    engine.received.append(body.get("input_ids") if isinstance(body, dict) else body)
    req: GenerateRequest = parse(GenerateRequest, body)
    if req.stream:
        raise ProtocolError("stream=true is not simulated by the scripted SGLang backend")
    sp = sampling_params(req.sampling_params, engine.config.sglang_version)
    prompts, batched = _prompts(engine, req)
    params = [_params(engine, sp, len(p)) for p in prompts]
    engine.check_failure()
    await engine.admit()  # SGLang holds requests that arrive while paused
    started = time.monotonic()
    base = req.rid if isinstance(req.rid, str) else uuid.uuid4().hex
    multi = batched or sp.n > 1
    samples = [
        generate(engine, p, prm, sp.n, sp.sampling_seed)
        for p, prm in zip(prompts, params, strict=True)
    ]
    rids = [
        f"{base}-{i * sp.n + j}" if multi else base
        for i in range(len(prompts))
        for j in range(sp.n)
    ]
    kv = sum(len(p) + prm.max_tokens for p, prm in zip(prompts, params, strict=True)) * sp.n
    run = engine.start(rids, kv)
    try:
        completed = await engine.advance(run, 1.0)
    finally:
        engine.finish(run)
    if not completed:  # aborted: keep the tokens generated so far
        done = engine.progress(run)
        samples = [[s.prefix(int(done * len(s.token_ids))) for s in ss] for ss in samples]
    latency = time.monotonic() - started
    engine.stats["requests"] += 1
    engine.stats["prompt_tokens"] += sum(map(len, prompts))
    items = []
    for i, (prompt, ss) in enumerate(zip(prompts, samples, strict=True)):
        for j, s in enumerate(ss):
            rid = rids[i * sp.n + j]
            _record(engine, rid, i * sp.n + j, prompt, s, run)
            items.append(_item(engine, req, rid, prompt, s, latency))
    return json_response(items if multi else items[0])
