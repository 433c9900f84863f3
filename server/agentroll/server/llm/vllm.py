"""The vLLM wire protocol, token path only (docs/protocol.md).

Generation always goes through `/v1/completions` with a token-id prompt, so the model
continues from exactly the ids it produced; chat-template rendering of *new* messages
goes through `/tokenize` with the messages form. Both exist unchanged from 0.11 to 0.33.

What differs per release, and is handled here (docs/protocol.md §1, §7, §8):
- `/pause`: none in 0.11; `?wait_for_inflight_requests=` in 0.12-0.19; `?mode=` from 0.20
  (dev mode only, `VLLM_SERVER_DEV_MODE=1`). `detect()` reads `/version` to choose.
- requests arriving while paused: held (0.12-0.26) or refused with 503 (0.33) -> `BackendPaused`.
- context-length messages (all mapped to `ContextLengthExceeded`) and 0.33's `weight_versions`.
"""

import re
from typing import Any, Literal, get_args

from agentroll.server.llm.base import (
    BackendError,
    BackendPaused,
    ChatTokenizer,
    Completion,
    PauseUnsupported,
    TokenizeResult,
)
from agentroll.server.llm.http import HTTPClient
from agentroll.server.llm.routed import Routing, decode_npy
from agentroll.server.llm.wire import (
    check_logprobs,
    error_message,
    exchange,
    raise_for_status,
    sampled_logprob,
)
from agentroll.server.schema import LogprobsMode, PauseMode
from agentroll.server.schema.messages import ChatMessage, ToolSpec

__all__ = [
    "BackendError",
    "BackendPaused",
    "Completion",
    "TokenizeResult",
    "VLLMClient",
    "VllmFamily",
    "family_of",
    "parse_release",
]

VllmFamily = Literal["0.11", "0.2x", "0.33"]
"""Protocol families: 0.11 (no pause), 0.12-0.32 (pause; requests held), 0.33+ (503s)."""

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_release(version: str) -> tuple[int, int, int]:
    """`"0.26.0"`, `"0.14.1rc2.dev3+g0abc"` -> (0, 26, 0); BackendError if unreadable."""
    match = _RELEASE.match(version.strip())
    if match is None:
        raise BackendError(f"unreadable vLLM version {version!r}", retryable=False)
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def family_of(release: tuple[int, int, int]) -> VllmFamily:
    if release < (0, 12, 0):
        return "0.11"
    if release < (0, 33, 0):
        return "0.2x"
    return "0.33"


def _logprobs_of(raw: Any, n: int) -> list[float]:
    """Sampled-token logprobs from either shape vLLM uses: completions'
    `{"token_logprobs": [...]}` or the chat/generate `{"content": [{"logprob": ...}]}`.

    A sampled token without its logprob is an error, never 0.0: a made-up logprob would
    silently corrupt the trainer's importance ratios."""
    if not raw:
        values = []
    elif "token_logprobs" in raw:
        values = raw["token_logprobs"]
    else:
        values = [entry.get("logprob") for entry in raw.get("content") or []]
    return [sampled_logprob(lp) for lp in values] if n else []


def _routing(raw: Any, rows: int) -> Routing | None:
    """The choice's routed experts (None without); a malformed or misaligned array is an
    error, never silently replayed: `rows` is how many the request asked for."""
    if raw is None:
        return None
    routing = decode_npy(str(raw))
    if routing.rows != rows:
        raise ValueError(f"routed_experts has {routing.rows} rows, the request read {rows}")
    return routing


def _weight_versions(raw: Any) -> list[tuple[str, int, int]] | None:
    if not raw:
        return None
    return [(str(r["version"]), int(r["start"]), int(r["end"])) for r in raw]


class VLLMClient:
    def __init__(
        self,
        base_url: str,
        model: str | None,
        http: HTTPClient,
        *,
        tokenizer: ChatTokenizer | None = None,
    ) -> None:
        """`tokenizer` (the spec's `tokenizer_path`) only tells the vocabulary size: vLLM
        renders chat templates itself (`/tokenize`). Without one, vLLM itself refuses ids
        beyond its vocabulary (400)."""
        self._tokenizer = tokenizer
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._http = http
        self.release: tuple[int, int, int] | None = None
        """Set by `detect()` (called on demand by `pause`/`resume`)."""
        self._logprobs_mode: LogprobsMode | None = None
        self._asked_logprobs_mode = False

    async def _post(self, path: str, body: dict[str, Any], timeout_s: float | None) -> Any:
        if self.model is not None:
            body["model"] = self.model
        response = await exchange(
            self._http, "POST", self.base_url + path, json_body=body, timeout_s=timeout_s
        )
        raise_for_status(path, response)
        return response.body

    async def vocab_size(self) -> int | None:
        return None if self._tokenizer is None else self._tokenizer.vocab_size

    # -- discovery ------------------------------------------------------------------------
    async def detect(self, *, timeout_s: float = 10.0) -> VllmFamily:
        """Read `GET /version`; remembers the release and returns its protocol family."""
        response = await exchange(
            self._http, "GET", self.base_url + "/version", timeout_s=timeout_s
        )
        raise_for_status("/version", response)
        body = response.body
        if not isinstance(body, dict) or "version" not in body:
            raise BackendError(f"/version answered {str(body)[:200]!r}", retryable=False)
        self.release = parse_release(str(body["version"]))
        return family_of(self.release)

    async def logprobs_mode(self, *, timeout_s: float = 10.0) -> LogprobsMode | None:
        """`--logprobs-mode` as the server reports it (`/server_info`, dev mode only); None
        when the server does not serve that route. Asked once: it cannot change while the
        server runs."""
        if self._asked_logprobs_mode:
            return self._logprobs_mode
        response = await exchange(
            self._http,
            "GET",
            self.base_url + "/server_info",
            params={"config_format": "json"},
            timeout_s=timeout_s,
        )
        if response.status == 404:  # not in dev mode: the server will not tell
            self._asked_logprobs_mode = True
            return None
        raise_for_status("/server_info", response)
        try:
            mode = response.body["vllm_config"]["model_config"]["logprobs_mode"]
        except (KeyError, TypeError) as exc:
            raise BackendError(
                f"/server_info has no model_config.logprobs_mode: {exc!r}", retryable=False
            ) from exc
        if mode not in get_args(LogprobsMode):
            raise BackendError(f"unknown logprobs mode {mode!r}", retryable=False)
        self._logprobs_mode, self._asked_logprobs_mode = mode, True
        return self._logprobs_mode

    @property
    def family(self) -> VllmFamily | None:
        return None if self.release is None else family_of(self.release)

    # -- data plane -----------------------------------------------------------------------
    async def tokenize_messages(
        self,
        messages: list[ChatMessage],
        tools: list[ToolSpec] | None,
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
        self,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        *,
        timeout_s: float,
        routing_from: int | None = None,
    ) -> Completion:
        body = {
            **sampling,
            "prompt": prompt_ids,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            # 0.33 reports which weights sampled which tokens; older releases ignore the field
            "return_weight_versions": True,
            "n": 1,
        }
        if routing_from is not None:
            # served with `--enable-return-routed-experts` (0.2x+); otherwise ignored
            body["routed_experts_prompt_start"] = routing_from
        data = await self._post("/v1/completions", body, timeout_s)
        try:
            choice = data["choices"][0]
            ids = [int(t) for t in choice["token_ids"]]
            usage = data.get("usage") or {}
            completion = Completion(
                ids,
                _logprobs_of(choice.get("logprobs"), len(ids)),
                choice.get("text") or "",
                choice.get("finish_reason") or "stop",
                int(usage.get("prompt_tokens", len(prompt_ids))),
                _weight_versions(choice.get("weight_versions")),
                _routing(
                    choice.get("routed_experts"),
                    len(prompt_ids) + len(ids) - 1 - (routing_from or 0),
                ),
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise BackendError(f"malformed completion response: {exc!r}", retryable=False) from exc
        check_logprobs(completion.token_ids, completion.logprobs)
        return completion

    # -- control plane --------------------------------------------------------------------
    async def _release(self) -> tuple[int, int, int]:
        if self.release is None:
            await self.detect()
        assert self.release is not None
        return self.release

    async def pause(self, mode: PauseMode = "wait", *, timeout_s: float = 300.0) -> None:
        """Pause generation: `abort` in-flight requests (partial tokens come back with
        finish_reason `abort`), `wait` until they finish, or `keep` them frozen (0.20+)."""
        release = await self._release()
        if release < (0, 12, 0):
            raise PauseUnsupported(
                f"vLLM {_dotted(release)} has no /pause; stop sending requests instead"
            )
        if release < (0, 20, 0):
            if mode == "keep":
                raise PauseUnsupported(f"vLLM {_dotted(release)} has no keep mode (0.20+)")
            params = {"wait_for_inflight_requests": "true" if mode == "wait" else "false"}
        else:
            params = {"mode": mode}
        await self._control("/pause", params, timeout_s)

    async def resume(self, *, timeout_s: float = 60.0) -> None:
        release = await self._release()
        if release < (0, 12, 0):
            raise PauseUnsupported(f"vLLM {_dotted(release)} has no /resume")
        await self._control("/resume", None, timeout_s)

    async def _control(self, path: str, params: dict[str, str] | None, timeout_s: float) -> None:
        response = await exchange(
            self._http, "POST", self.base_url + path, params=params, timeout_s=timeout_s
        )
        if response.status == 404 and self.release is not None and self.release >= (0, 20, 0):
            raise PauseUnsupported(
                f"{path} is not served: vLLM {_dotted(self.release)} exposes it only with "
                f"VLLM_SERVER_DEV_MODE=1 ({error_message(response)})"
            )
        raise_for_status(path, response)


def _dotted(release: tuple[int, int, int]) -> str:
    return ".".join(map(str, release))
