"""Request models of the SGLang endpoints the double serves (docs/protocol.md §9).

`/generate` ignores unknown top-level fields, but 0.5.23 checks `sampling_params` against a
contract and refuses unknown keys (400, bare-string `error`); 0.5.2 accepts them. Field names
are SGLang's: `max_new_tokens` (default 128), `sampling_seed`, `no_stop_trim`, ...
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentroll.testing.scripted_llm.common import LenientModel
from agentroll.testing.scripted_llm.config import SGLangVersion
from agentroll.testing.scripted_llm.errors import ContractError, ProtocolError


class SGLangSamplingParams(BaseModel):
    """0.5.23's sampling contract (every key it accepts; the double acts on the first block)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    sampling_seed: int | None = None
    # accepted, not simulated
    stop_regex: str | list[str] | None = None
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    spaces_between_special_tokens: bool = True
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    custom_params: dict[str, Any] | None = None
    beam_width: int | None = None
    watermark: Any = None
    choice: Any = None


class _LegacySamplingParams(SGLangSamplingParams):
    model_config = ConfigDict(extra="ignore")


class GenerateRequest(LenientModel):
    rid: str | list[str] | None = None
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | None = None
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    stream: bool = False


class PauseGenerationRequest(LenientModel):
    mode: str = "abort"


class TokenizeRequest(LenientModel):
    """0.5.23 `/tokenize`: exactly one of `prompt` / `messages`."""

    prompt: str | list[str] | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(LenientModel):
    tokens: list[int]
    skip_special_tokens: bool = True


class AbortRequest(LenientModel):
    rid: str = ""
    abort_all: bool = False


class UpdateWeightVersionRequest(LenientModel):
    new_version: str
    abort_all_requests: bool = False


def _message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


def parse(model: type[BaseModel], body: Any) -> Any:
    if not isinstance(body, dict):
        raise ProtocolError("request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ProtocolError(_message(exc)) from exc


def sampling_params(raw: dict[str, Any] | None, version: SGLangVersion) -> SGLangSamplingParams:
    model = SGLangSamplingParams if version == "0.5.23" else _LegacySamplingParams
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden"]
        if unknown:
            raise ContractError(
                f"Unknown sampling_params key(s): {', '.join(sorted(unknown))}. "
                "Check the sampling parameters contract."
            ) from exc
        raise ProtocolError(f"invalid sampling_params: {_message(exc)}") from exc
