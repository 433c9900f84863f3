"""One HTTP exchange with a backend, and the mapping of its failures onto our errors.

Shared by the vLLM and SGLang clients: both send JSON and answer errors either as
`{"error": {"message": ...}}` (vLLM, SGLang native), `{"error": "..."}` (vLLM `/pause`, SGLang
sampling-contract errors) or a flat `{"message": ...}` (SGLang's OpenAI routes).
"""

import re
from typing import Any

from agentroll.handlers import ContextLengthExceeded
from agentroll.server.llm.base import BackendError, BackendPaused
from agentroll.server.llm.http import (
    HTTPClient,
    HTTPConnectError,
    HTTPResponse,
    HTTPTimeout,
    HTTPTransportError,
)

# Every vLLM version's "prompt too long" wording, 0.33's max_tokens checks and SGLang's two
# context checks (docs/protocol.md §8.2).
CONTEXT_ERROR = re.compile(
    r"maximum context length|cannot be greater than max_model_len|max_tokens must be at least 1"
    r"|cannot be greater than the model's maximum context length"
    r"|longer than the model's context length"
)
PAUSED_ERROR = re.compile(r"generation is paused", re.IGNORECASE)


def error_message(response: HTTPResponse) -> str:
    body = response.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(body)[:500]


async def exchange(
    http: HTTPClient,
    method: str,
    url: str,
    *,
    json_body: Any = None,
    params: dict[str, str] | None = None,
    timeout_s: float | None,
) -> HTTPResponse:
    """Send one request; transport failures become retryable `BackendError`s."""
    try:
        return await http.request(
            method, url, json_body=json_body, params=params, timeout_s=timeout_s
        )
    except HTTPTimeout as exc:
        # The request may have reached the engine: the time is lost but no token was kept.
        raise BackendError(
            f"{method} {url} timed out: {exc!r}", retryable=True, timed_out=True
        ) from exc
    except HTTPConnectError as exc:
        raise BackendError(f"{method} {url} failed: {exc!r}", retryable=True, sent=False) from exc
    except HTTPTransportError as exc:
        raise BackendError(f"{method} {url} failed: {exc!r}", retryable=True) from exc


def raise_for_status(what: str, response: HTTPResponse) -> None:
    """Map a non-200 answer: context overflow, paused, retryable server trouble, or final."""
    if response.status == 200:
        return
    message = error_message(response)
    if response.status == 400 and CONTEXT_ERROR.search(message):
        raise ContextLengthExceeded(message)
    if response.status == 503 and PAUSED_ERROR.search(message):
        raise BackendPaused(f"{what} refused while paused: {message}")
    retryable = response.status >= 500 or response.status in (404, 429)
    raise BackendError(
        f"{what} returned {response.status}: {message}",
        retryable=retryable,
        status=response.status,
    )


def sampled_logprob(value: Any) -> float:
    """One sampled token's logprob as the backend sent it; a missing one is an error."""
    if value is None:
        raise BackendError("backend returned a sampled token without its logprob", retryable=False)
    return float(value)


def check_logprobs(token_ids: list[int], logprobs: list[float]) -> None:
    """Every sampled token has exactly one logprob (none missing, none made up as 0.0)."""
    if len(logprobs) != len(token_ids):
        raise BackendError(
            f"backend returned {len(logprobs)} logprobs for {len(token_ids)} sampled tokens",
            retryable=False,
        )
