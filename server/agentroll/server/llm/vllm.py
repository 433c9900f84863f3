"""The vLLM wire protocol, token path only (see shared reference `vllm-protocol.md`).

Generation always goes through `/v1/completions` with a token-id prompt, so the model
continues from exactly the ids it produced; chat-template rendering of *new* messages
goes through `/tokenize` with the messages form.
"""

import re
from dataclasses import dataclass
from typing import Any

from agentroll.handlers import ContextLengthExceeded, Message
from agentroll.server.llm.http import HTTPClient, HTTPResponse, HTTPTimeout, HTTPTransportError

# Every version's "prompt too long" wording, plus 0.33's max_tokens checks (reference §8).
_CONTEXT_ERROR = re.compile(
    r"maximum context length|cannot be greater than max_model_len|max_tokens must be at least 1"
    r"|cannot be greater than the model's maximum context length"
)


class BackendError(RuntimeError):
    """A backend call failed. `retryable` means no token was committed and another try may work."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


@dataclass(frozen=True, slots=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class TokenizeResult:
    token_ids: list[int]
    max_model_len: int | None


def _error_message(response: HTTPResponse) -> str:
    body = response.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(body)[:500]


class VLLMClient:
    def __init__(self, base_url: str, model: str | None, http: HTTPClient) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._http = http

    async def _post(self, path: str, body: dict[str, Any], timeout_s: float | None) -> Any:
        if self.model is not None:
            body["model"] = self.model
        try:
            response = await self._http.request(
                "POST", self.base_url + path, json_body=body, timeout_s=timeout_s
            )
        except HTTPTimeout as exc:
            # The request may have reached the engine: the time is lost but no token was kept.
            raise BackendError(f"{path} timed out: {exc!r}", retryable=True) from exc
        except HTTPTransportError as exc:
            raise BackendError(f"{path} failed: {exc!r}", retryable=True) from exc
        if response.status == 200:
            return response.body
        message = _error_message(response)
        if response.status == 400 and _CONTEXT_ERROR.search(message):
            raise ContextLengthExceeded(message)
        retryable = response.status >= 500 or response.status in (404, 429)
        raise BackendError(
            f"{path} returned {response.status}: {message}",
            retryable=retryable,
            status=response.status,
        )

    async def tokenize_messages(
        self,
        messages: list[Message],
        tools: list[Message] | None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
        timeout_s: float = 60.0,
    ) -> TokenizeResult:
        body: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "add_special_tokens": False,
        }
        if tools:
            body["tools"] = tools
        data = await self._post("/tokenize", body, timeout_s)
        return TokenizeResult(list(data["tokens"]), data.get("max_model_len"))

    async def complete(
        self, prompt_ids: list[int], sampling: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        body = {
            **sampling,
            "prompt": prompt_ids,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "n": 1,
        }
        data = await self._post("/v1/completions", body, timeout_s)
        try:
            choice = data["choices"][0]
            ids = [int(t) for t in choice["token_ids"]]
            raw = (choice.get("logprobs") or {}).get("token_logprobs") or [0.0] * len(ids)
            logprobs = [0.0 if lp is None else float(lp) for lp in raw]
            usage = data.get("usage") or {}
            completion = Completion(
                ids,
                logprobs,
                choice.get("text") or "",
                choice.get("finish_reason") or "stop",
                int(usage.get("prompt_tokens", len(prompt_ids))),
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(f"malformed completion response: {exc!r}", retryable=False) from exc
        if len(completion.logprobs) != len(completion.token_ids):
            raise BackendError(
                "backend returned logprobs misaligned with token ids", retryable=False
            )
        return completion
