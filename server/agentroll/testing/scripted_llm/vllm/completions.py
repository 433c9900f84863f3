"""`POST /v1/completions`: validation per vLLM version, then the simulated run."""

import time
import uuid
from typing import Any

from starlette.responses import Response, StreamingResponse

from agentroll.testing.scripted_llm.common import json_response
from agentroll.testing.scripted_llm.engine import Engine
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.generation import (
    check_context,
    check_prompt_ids,
    check_stop_strings,
    generate,
)
from agentroll.testing.scripted_llm.sampling import SamplingParams
from agentroll.testing.scripted_llm.vllm.protocol import CompletionRequest, parse_body
from agentroll.testing.scripted_llm.vllm.responses import (
    Job,
    full_response,
    record,
    truncate,
)
from agentroll.testing.scripted_llm.vllm.streaming import error_stream, stream_completion


def check_model(engine: Engine, model: str | None) -> None:
    served = engine.config.model
    if model is None or model == served:
        return
    message = f"The model `{model}` does not exist."
    if engine.config.version == "0.33":
        message += f" Valid aliases: {served}."
    raise ProtocolError(message, status=404, err_type="NotFoundError")


def _prompts(engine: Engine, req: CompletionRequest) -> list[list[int]]:
    raw = req.prompt
    if isinstance(raw, str):
        batch = [engine.tokenizer.encode(raw)]
    elif raw and all(isinstance(p, str) for p in raw):
        batch = [engine.tokenizer.encode(p) for p in raw]  # type: ignore[arg-type]
    elif raw and all(isinstance(p, list) for p in raw):
        batch = [list(p) for p in raw]  # type: ignore[arg-type]
    else:
        batch = [list(raw)]  # type: ignore[arg-type]
    if len(batch) > engine.config.max_batch_prompts:
        raise ProtocolError(
            f"Too many prompts: {len(batch)} > {engine.config.max_batch_prompts}.", param="prompt"
        )
    for ids in batch:
        check_prompt_ids(engine, ids)
    return batch


def _sampling(engine: Engine, req: CompletionRequest, prompt_len: int) -> SamplingParams:
    cfg = engine.config
    temperature = 1.0 if req.temperature is None else req.temperature
    if temperature < 0 or (cfg.version == "0.33" and temperature > 2):
        raise ProtocolError(
            f"temperature must be in [0, 2], got {temperature}.", param="temperature"
        )
    if req.top_p is not None and not 0 < req.top_p <= 1:
        raise ProtocolError(f"top_p must be in (0, 1], got {req.top_p}.", param="top_p")
    if req.n < 1:
        raise ProtocolError(f"n must be at least 1, got {req.n}.", param="n")
    requested = 16 if req.max_tokens is None else req.max_tokens
    if req.min_tokens > requested:
        raise ProtocolError(
            f"min_tokens must be less than or equal to max_tokens={requested}, "
            f"got {req.min_tokens}.",
            param="min_tokens",
        )
    max_tokens = check_context(cfg.version, prompt_len, requested, cfg.max_model_len)
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    check_stop_strings(engine, stop)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if req.top_k is None else req.top_k,
        logprobs_mode=cfg.logprobs_mode,
        stop=tuple(s for s in stop if s),
        stop_token_ids=frozenset(req.stop_token_ids or ()),
        include_stop_str_in_output=req.include_stop_str_in_output,
        ignore_eos=req.ignore_eos,
        min_tokens=min(req.min_tokens, max_tokens),
        skip_special_tokens=True if req.skip_special_tokens is None else req.skip_special_tokens,
    )


def _logprobs_k(engine: Engine, req: CompletionRequest) -> int | None:
    k = req.logprobs
    cap = engine.config.max_logprobs
    if k is None:
        return None
    if k == -1:
        return cap
    if k < 0 or k > cap:
        raise ProtocolError(
            f"Requested sample logprobs of {k}, which is greater than max allowed: {cap}",
            param="logprobs",
        )
    return k


async def create_completion(engine: Engine, body: Any, header_request_id: str | None) -> Response:
    engine.received.append(body.get("prompt") if isinstance(body, dict) else body)
    req = parse_body(CompletionRequest, body, engine.config.version)
    check_model(engine, req.model)
    prompts = _prompts(engine, req)
    params = [_sampling(engine, req, len(p)) for p in prompts]
    logprobs_k = _logprobs_k(engine, req)
    if req.stream and req.prompt_logprobs is not None:
        raise ProtocolError(
            "`prompt_logprobs` are not available when `stream=True`.", param="prompt_logprobs"
        )
    try:
        engine.check_failure()
        await engine.admit()
    except ProtocolError as exc:
        if not req.stream or exc.status < 500:
            raise
        # vLLM has already sent the 200 header: the error arrives as an event
        return StreamingResponse(error_stream(exc), media_type="text/event-stream")
    rid = header_request_id or req.request_id or uuid.uuid4().hex
    pairs = list(zip(prompts, params, strict=True))
    samples = [generate(engine, p, sp, req.n, req.seed) for p, sp in pairs]
    job = Job(engine, req, f"cmpl-{rid}", int(time.time()), prompts, samples, logprobs_k)
    kv_tokens = sum(len(p) + sp.max_tokens for p, sp in pairs) * req.n
    job.run = engine.start([f"cmpl-{rid}-{i}" for i in range(len(prompts))], kv_tokens)
    if req.stream:
        return StreamingResponse(stream_completion(job), media_type="text/event-stream")
    try:
        completed = await engine.advance(job.run, 1.0)
    finally:
        engine.finish(job.run)
    if not completed:
        truncate(job)
    record(job)
    return json_response(full_response(job))
