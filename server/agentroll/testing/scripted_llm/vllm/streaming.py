"""Server-sent events for `stream: true` (chunks dumped like vLLM's `exclude_unset`)."""

from collections.abc import AsyncIterator
from typing import Any

from agentroll.testing.scripted_llm.common import dumps
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.sampling import Sample
from agentroll.testing.scripted_llm.vllm.responses import Job, logprobs, record, usage

STREAM_STEPS = 8  # a streamed request with latency sends its tokens in this many bursts


def _event(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


async def error_stream(exc: ProtocolError) -> AsyncIterator[bytes]:
    yield _event(exc.envelope())
    yield b"data: [DONE]\n\n"


class _StreamState:
    """Per-choice cursor: tokens sent, text sent, text_offset, first-chunk flag."""

    def __init__(self, s: Sample) -> None:
        self.sent = 0
        self.first = True
        self.offset = 0
        self.cum = [0]
        for piece in s.pieces:
            self.cum.append(self.cum[-1] + len(piece))
        self.full = "".join(s.pieces)


def _chunk(
    job: Job,
    index: int,
    p: int,
    s: Sample,
    st: _StreamState,
    b: int,
    finish: str | None,
    stop_reason: int | str | None,
) -> dict[str, Any]:
    a = st.sent
    cut = s.text_len if finish != "abort" else len(st.full)
    text = st.full[min(st.cum[a], cut) : min(st.cum[b], cut)]
    choice: dict[str, Any] = {
        "index": index,
        "text": text,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": stop_reason,
    }
    if job.logprobs_k is not None:
        choice["logprobs"] = lp = logprobs(job, s, a, b, st.offset)
        if lp["tokens"]:
            st.offset = lp["text_offset"][-1] + len(lp["tokens"][-1])
    if job.req.return_token_ids:
        if st.first:
            choice["prompt_token_ids"] = job.prompts[p]
        choice["token_ids"] = s.token_ids[a:b]
    st.first = False
    st.sent = b
    chunk: dict[str, Any] = {
        "id": job.response_id,
        "object": "text_completion",
        "created": job.created,
        "model": job.engine.config.model,
        "choices": [choice],
    }
    options = job.req.stream_options
    if options is not None and options.continuous_usage_stats:
        chunk["usage"] = usage(job, b)
    return chunk


def _emit(job: Job, states: list[_StreamState], upto: list[int], done: bool) -> list[bytes]:
    """One chunk per new token; the choice's last token carries its finish reason."""
    events = []
    for (index, p, s), st, stop_at in zip(job.choices(), states, upto, strict=True):
        for b in range(st.sent + 1, stop_at + 1):
            last = done and b == len(s.token_ids)
            events.append(
                _event(
                    _chunk(
                        job,
                        index,
                        p,
                        s,
                        st,
                        b,
                        s.finish_reason if last else None,
                        s.stop_reason if last else None,
                    )
                )
            )
    return events


async def stream_completion(job: Job) -> AsyncIterator[bytes]:
    engine, run = job.engine, job.run
    assert run is not None
    states = [_StreamState(s) for _, _, s in job.choices()]
    try:
        steps = STREAM_STEPS if engine.config.latency_s > 0 else 1
        aborted = False
        for step in range(1, steps + 1):
            if not await engine.advance(run, step / steps):
                aborted = True
                break
            upto = [len(s.token_ids) * step // steps for _, _, s in job.choices()]
            for event in _emit(job, states, upto, done=step == steps):
                yield event
        if aborted:
            progress = engine.progress(run)
            upto = [
                max(st.sent, int(progress * len(s.token_ids)))
                for (_, _, s), st in zip(job.choices(), states, strict=True)
            ]
            for event in _emit(job, states, upto, done=False):
                yield event
            for (index, p, s), st in zip(job.choices(), states, strict=True):
                yield _event(_chunk(job, index, p, s, st, st.sent, "abort", None))
            job.samples = [
                [s.prefix(states[p * job.req.n + j].sent) for j, s in enumerate(ss)]
                for p, ss in enumerate(job.samples)
            ]
        options = job.req.stream_options
        if options is not None and options.include_usage:
            total = sum(len(s.token_ids) for _, _, s in job.choices())
            yield _event(
                {
                    "id": job.response_id,
                    "object": "text_completion",
                    "created": job.created,
                    "model": engine.config.model,
                    "choices": [],
                    "usage": usage(job, total),
                }
            )
        yield b"data: [DONE]\n\n"
        record(job)
    finally:
        engine.finish(run)
