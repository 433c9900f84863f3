"""SGLang's native protocol, token path only (docs/protocol.md §9).

Generation: `POST /generate` with `input_ids` and `return_logprob`; ids come from
`output_ids`, logprobs from `meta_info.output_token_logprobs` (`[logprob, id, text]`), and
`meta_info.finish_reason` objects are mapped onto vLLM's words (`stop` / `length` / `abort`).

Template deltas: SGLang 0.5.2 has no `/tokenize`, and 0.5.23's takes no
`continue_final_message`, so messages are rendered by a `ChatTokenizer` on our side -- the one
passed in, or else one loaded from the `tokenizer_path` that `/get_model_info` reports when that
directory is readable here (same machine or shared filesystem). Without either, plain renders go
to 0.5.23's `/tokenize` and renders that need `continue_final_message` fail with a clear error.

Pause: `/pause_generation` + `/continue_generation`. 0.5.23 takes a mode (`abort`, `retract`,
`in_place`); 0.5.2 always aborts. Requests sent while paused are held by the server, not refused.
Portable modes map as abort -> `abort`, keep -> `in_place`; SGLang has no drain (`wait`) mode.
"""

import asyncio
from pathlib import Path
from typing import Any, Literal

from agentroll.server.llm.base import (
    BackendError,
    ChatTokenizer,
    Completion,
    PauseUnsupported,
    TokenizeResult,
)
from agentroll.server.llm.http import HTTPClient
from agentroll.server.llm.local_tokenizer import LocalChatTokenizer, TemplateRenderError
from agentroll.server.llm.wire import check_logprobs, exchange, raise_for_status, sampled_logprob
from agentroll.server.schema import LogprobsMode, PauseMode
from agentroll.server.schema.messages import ChatMessage, ToolSpec

SGLangFamily = Literal["0.5.2", "0.5.23"]
"""0.5.2: `/get_model_info` only, no `/tokenize`, pause always aborts. 0.5.23: `/model_info`,
`/tokenize`, pause modes, strict `sampling_params`."""

# vLLM-style sampling keys (what sessions pass) -> SGLang `sampling_params` keys.
_SAMPLING_KEYS = {
    "max_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
    "seed": "sampling_seed",
    "include_stop_str_in_output": "no_stop_trim",
    **{
        k: k
        for k in (
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "stop",
            "stop_token_ids",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "ignore_eos",
            "skip_special_tokens",
            "n",
        )
    },
}
_PAUSE_MODE = {"abort": "abort", "keep": "in_place"}


def sglang_sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    """Translate vLLM-named sampling parameters; unknown ones are an error here rather than
    a 400 from 0.5.23's strict contract (or silently ignored by older servers)."""
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        target = _SAMPLING_KEYS.get(key)
        if target is None:
            raise BackendError(
                f"sampling parameter {key!r} has no SGLang equivalent", retryable=False
            )
        if value is not None:
            out[target] = value
    return out


def finish_reason_of(raw: Any) -> str:
    """`{"type": "stop", "matched": ...}` -> "stop"; same for length/abort."""
    if isinstance(raw, dict):
        return str(raw.get("type") or "stop")
    return "stop" if raw is None else str(raw)


class SGLangClient:
    def __init__(
        self,
        base_url: str,
        model: str | None,
        http: HTTPClient,
        *,
        tokenizer: ChatTokenizer | None = None,
        tokenizer_from_server: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model  # SGLang serves one model; kept for the common interface
        self._http = http
        self.tokenizer = tokenizer
        self._tokenizer_from_server = tokenizer_from_server
        self.family: SGLangFamily | None = None
        self.model_info: dict[str, Any] = {}
        self.max_model_len: int | None = None
        self._detect_lock = asyncio.Lock()

    async def _call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float | None
    ) -> Any:
        response = await exchange(
            self._http, method, self.base_url + path, json_body=body, timeout_s=timeout_s
        )
        raise_for_status(path, response)
        return response.body

    async def vocab_size(self) -> int | None:
        """From the tokenizer given, or loaded from the `tokenizer_path` the server reports
        (read on first use, before any generation request is sent)."""
        await self._ensure_detected()
        return None if self.tokenizer is None else self.tokenizer.vocab_size

    # -- discovery ------------------------------------------------------------------------
    async def detect(self, *, timeout_s: float = 10.0) -> SGLangFamily:
        """Tell 0.5.23-style servers (`/model_info` exists) from 0.5.2-style ones; remember
        the model info, the context length (0.5.23) and, if readable, the tokenizer."""
        url = self.base_url + "/model_info"
        response = await exchange(self._http, "GET", url, timeout_s=timeout_s)
        if response.status == 404:
            self.family = "0.5.2"
            self.model_info = await self._call("GET", "/get_model_info", timeout_s=timeout_s)
        else:
            raise_for_status("/model_info", response)
            self.family, self.model_info = "0.5.23", response.body
            probe = await self._call("POST", "/tokenize", {"prompt": "x"}, timeout_s=timeout_s)
            self.max_model_len = probe.get("max_model_len")
        path = self.model_info.get("tokenizer_path")
        if self.tokenizer is None and self._tokenizer_from_server and path:
            self.tokenizer = await asyncio.to_thread(_load_local, str(path), self.max_model_len)
        return self.family

    async def _ensure_detected(self) -> SGLangFamily:
        async with self._detect_lock:
            if self.family is None:
                await self.detect()
        assert self.family is not None
        return self.family

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
        family = await self._ensure_detected()
        if self.tokenizer is not None:
            try:
                ids = self.tokenizer.encode_messages(
                    messages,
                    tools,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                )
            except TemplateRenderError as exc:
                raise BackendError(str(exc), retryable=False) from exc
            limit = self.tokenizer.max_model_len or self.max_model_len
            return TokenizeResult(ids, limit)
        if family == "0.5.2" or continue_final_message:
            raise BackendError(
                f"SGLang {family} cannot render this chat template request "
                f"({'no /tokenize' if family == '0.5.2' else 'no continue_final_message'}); "
                "configure a local tokenizer for this backend",
                retryable=False,
            )
        body: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
        }
        if tools:
            body["tools"] = tools
        data = await self._call("POST", "/tokenize", body, timeout_s=timeout_s)
        return TokenizeResult(list(data["tokens"]), data.get("max_model_len"))

    async def logprobs_mode(self, *, timeout_s: float = 10.0) -> LogprobsMode | None:
        """SGLang does not report what its logprobs are: only a registration can say."""
        return None

    async def complete(
        self,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        *,
        timeout_s: float,
        routing_from: int | None = None,
    ) -> Completion:
        """`routing_from` is not asked for: the routed-experts wire path is vLLM's only."""
        params = sglang_sampling({**sampling, "n": 1})
        await self._ensure_detected()
        limit = self.max_model_len
        wanted = params.get("max_new_tokens")
        if (
            limit is not None
            and wanted is not None
            and wanted > 1
            and len(prompt_ids) + wanted == limit
        ):
            # SGLang keeps one position free (prompt + max_new_tokens must stay below the
            # context length) where vLLM allows equality: a budget computed the vLLM way
            # loses that one token instead of being refused. Larger overshoots are refused.
            params["max_new_tokens"] = wanted - 1
        body = {
            "input_ids": prompt_ids,
            "sampling_params": params,
            "return_logprob": True,
            "logprob_start_len": -1,
            "top_logprobs_num": 0,
            "stream": False,
        }
        data = await self._call("POST", "/generate", body, timeout_s=timeout_s)
        try:
            item = data[0] if isinstance(data, list) else data
            meta = item["meta_info"]
            ids = [int(t) for t in item["output_ids"]]
            entries = meta.get("output_token_logprobs") or []
            logprobs = [sampled_logprob(e[0]) for e in entries]
            logged_ids = [int(e[1]) for e in entries]
            completion = Completion(
                ids,
                logprobs,
                item.get("text") or "",
                finish_reason_of(meta.get("finish_reason")),
                int(meta.get("prompt_tokens", len(prompt_ids))),
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise BackendError(f"malformed /generate response: {exc!r}", retryable=False) from exc
        check_logprobs(ids, logprobs)
        if logged_ids != ids:
            raise BackendError(
                "backend returned logprobs misaligned with output ids", retryable=False
            )
        return completion

    # -- control plane --------------------------------------------------------------------
    async def pause(self, mode: PauseMode = "abort", *, timeout_s: float = 300.0) -> None:
        """abort: in-flight requests end with their partial tokens (finish_reason `abort`);
        keep: they stay in place with their KV until `resume` (0.5.23 only)."""
        family = await self._ensure_detected()
        target = _PAUSE_MODE.get(mode)
        if target is None:
            raise PauseUnsupported(
                f"SGLang has no {mode!r} pause; stop dispatching and wait for in-flight "
                "requests, then pause with 'keep' or 'abort'"
            )
        if family == "0.5.2":
            if target != "abort":
                raise PauseUnsupported("SGLang 0.5.2 can only pause by aborting (mode 'abort')")
            await self._call("POST", "/pause_generation", timeout_s=timeout_s)
            return
        await self._call("POST", "/pause_generation", {"mode": target}, timeout_s=timeout_s)

    async def resume(self, *, timeout_s: float = 60.0) -> None:
        family = await self._ensure_detected()
        body: dict[str, Any] | None = None if family == "0.5.2" else {}
        await self._call("POST", "/continue_generation", body, timeout_s=timeout_s)


def _load_local(path: str, max_model_len: int | None) -> LocalChatTokenizer | None:
    """The server's tokenizer directory, if it is readable here."""
    if not (Path(path) / "tokenizer.json").is_file():
        return None  # a hub id or a path on another machine
    try:
        return LocalChatTokenizer.from_dir(path, max_model_len=max_model_len)
    except (OSError, ValueError):  # unreadable or template-less: fall back to /tokenize
        return None
