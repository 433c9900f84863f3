"""vLLM's `/v1/completions` response shapes, built as plain dicts.

Non-streaming bodies carry every key of vLLM's full model dump (absent values as null); the
keys differ slightly per protocol version. Dicts, not pydantic models: this is the hot path.
"""

import random
from array import array
from dataclasses import dataclass
from typing import Any

from agentroll.testing.scripted_llm.common import version_ranges
from agentroll.testing.scripted_llm.engine import Engine, Run
from agentroll.testing.scripted_llm.generation import prompt_digest
from agentroll.testing.scripted_llm.routing import routed_experts_field
from agentroll.testing.scripted_llm.sampling import (
    LOGPROB_FLOOR,
    Sample,
    logprob_for,
    top_logprobs,
)
from agentroll.testing.scripted_llm.vllm.protocol import CompletionRequest


@dataclass(slots=True)
class Job:
    """Everything the response builders need about one request."""

    engine: Engine
    req: CompletionRequest
    response_id: str
    created: int
    prompts: list[list[int]]
    samples: list[list[Sample]]
    logprobs_k: int | None
    run: Run | None = None

    def choices(self) -> list[tuple[int, int, Sample]]:
        """(choice index, prompt index, sample) in vLLM's order: prompt, then sample."""
        n = self.req.n
        return [(p * n + j, p, s) for p, ss in enumerate(self.samples) for j, s in enumerate(ss)]


def truncate(job: Job) -> None:
    """An aborted run keeps the tokens generated before the abort."""
    progress = job.engine.progress(job.run) if job.run else 0.0
    job.samples = [[s.prefix(int(progress * len(s.token_ids))) for s in ss] for ss in job.samples]


def record(job: Job) -> None:
    engine = job.engine
    engine.stats["requests"] += 1
    engine.stats["prompt_tokens"] += sum(map(len, job.prompts))
    for index, p, s in job.choices():
        engine.stats["generation_tokens"] += len(s.token_ids)
        engine.stats[f"finished:{s.finish_reason}"] += 1
        engine.record(
            {
                "id": job.response_id,
                "index": index,
                "created": job.created,
                "prompt_token_ids": array("i", job.prompts[p]),
                "min_tokens": job.req.min_tokens,
                "token_ids": array("i", s.token_ids),
                "logprobs": array("d", s.logprobs),
                "text": s.text,
                "finish_reason": s.finish_reason,
                "stop_reason": s.stop_reason,
                "weight_versions": weight_versions(job, s),
            }
        )


def weight_versions(job: Job, s: Sample) -> list[dict[str, Any]]:
    """Half-open output-token ranges per weight version that produced them."""
    return version_ranges(job.engine, job.run, len(s.token_ids))


def logprobs(job: Job, s: Sample, a: int, b: int, offset: int) -> dict[str, Any]:
    tok = job.engine.tokenizer
    as_ids = bool(job.req.return_tokens_as_token_ids)
    k = job.logprobs_k or 0
    regular = tok.vocab_size - len(tok.added_ids)

    def name(token_id: int) -> str:
        return f"token_id:{token_id}" if as_ids else tok.token_text[token_id]

    tokens, text_offset, token_logprobs, tops = [], [], [], []
    for pos in range(a, b):
        token_id, lp = s.token_ids[pos], max(s.logprobs[pos], LOGPROB_FLOOR)
        token = name(token_id)
        tokens.append(token)
        text_offset.append(offset)
        offset += len(token)
        token_logprobs.append(lp)
        if k:
            tops.append({name(i): v for i, v in top_logprobs(token_id, lp, k, regular, pos)})
        else:
            tops.append({token: lp})
    return {
        "text_offset": text_offset,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": tops,
    }


def prompt_logprobs(job: Job, p: int) -> list[dict[str, Any] | None] | None:
    """Element 0 is null; then `{"<id>": {logprob, rank, decoded_token}}` per position."""
    if job.req.prompt_logprobs is None:
        return None
    tok = job.engine.tokenizer
    ids = job.prompts[p]
    rng = random.Random(f"prompt:{prompt_digest(ids)}")
    out: list[dict[str, Any] | None] = [None]
    for token_id in ids[1:]:
        lp = logprob_for(rng.random(), greedy=False) * 2  # prompts are less likely than samples
        out.append(
            {
                str(token_id): {
                    "logprob": max(lp, LOGPROB_FLOOR),
                    "rank": 1 + int(-lp),
                    "decoded_token": tok.token_text[token_id],
                }
            }
        )
    return out


def usage(job: Job, completion_tokens: int) -> dict[str, Any]:
    prompt_tokens = sum(map(len, job.prompts))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }
    if job.engine.config.version != "0.11":
        usage["completion_tokens_details"] = None
    return usage


def full_response(job: Job) -> dict[str, Any]:
    version = job.engine.config.version
    req = job.req
    with_ids = bool(req.return_token_ids)
    choices = []
    for index, p, s in job.choices():
        text = s.text
        if req.echo and not (with_ids and version == "0.33"):
            text = job.engine.tokenizer.decode(job.prompts[p], skip_special_tokens=True) + text
        choice: dict[str, Any] = {
            "index": index,
            "text": text,
            "logprobs": None
            if job.logprobs_k is None
            else logprobs(job, s, 0, len(s.token_ids), 0),
            "finish_reason": s.finish_reason,
            "stop_reason": s.stop_reason,
            "token_ids": s.token_ids if with_ids else None,
            "prompt_logprobs": prompt_logprobs(job, p),
            "prompt_token_ids": job.prompts[p] if with_ids else None,
        }
        if version != "0.11":
            choice["routed_experts"] = routed_experts_field(
                job.prompts[p] + s.token_ids,
                req.routed_experts_prompt_start,
                job.engine.config.moe,
            )
        if version == "0.33":
            choice["weight_versions"] = (
                weight_versions(job, s) if req.return_weight_versions else None
            )
        choices.append(choice)
    body: dict[str, Any] = {
        "id": job.response_id,
        "object": "text_completion",
        "created": job.created,
        "model": job.engine.config.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(job, sum(len(s.token_ids) for _, _, s in job.choices())),
        "kv_transfer_params": None,
    }
    if version != "0.11":
        body["ec_transfer_params"] = None
        body["metrics"] = None
    return body
