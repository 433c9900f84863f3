"""Request models of the vLLM endpoints the double serves, and vLLM-style 400s for them.

Unknown JSON fields are ignored, as vLLM does (`extra="ignore"`). Responses are built as
plain dicts in `completions.py` (the hot path; a pydantic dump per token would cost more CPU
than the rest of a request), with the null-valued keys vLLM's full model dump carries.
"""

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, Field, ValidationError

from agentroll.testing.scripted_llm.common import LenientModel
from agentroll.testing.scripted_llm.config import VllmVersion
from agentroll.testing.scripted_llm.errors import ProtocolError

M = TypeVar("M", bound=BaseModel)


class StreamOptions(LenientModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class CompletionRequest(LenientModel):
    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str]
    max_tokens: int | None = 16
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    n: int = 1
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    echo: bool | None = False
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool = False
    request_id: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    return_weight_versions: bool | None = False
    routed_experts_prompt_start: int = Field(default=0, ge=0)


class TokenizeCompletionRequest(LenientModel):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(LenientModel):
    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool | None = False


class DetokenizeRequest(LenientModel):
    model: str | None = None
    tokens: list[int]


class WeightVersionRequest(LenientModel):
    new_version: str


def validation_error(exc: ValidationError, version: VllmVersion) -> ProtocolError:
    """vLLM answers schema errors with 400 (not 422) and type `Bad Request`."""
    errors = exc.errors(include_url=False)
    if version == "0.11":
        message = str(exc)
    else:
        noun = "error" if len(errors) == 1 else "errors"
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors]
        message = f"{len(errors)} validation {noun}:\n" + "\n".join(lines)
    return ProtocolError(message, err_type="Bad Request")


def parse_body(model: type[M], body: Any, version: VllmVersion) -> M:
    if not isinstance(body, dict):
        raise ProtocolError(
            "1 validation error:\n  body: Input should be a valid dictionary",
            err_type="Bad Request",
        )
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc, version) from exc


async def read_body(request: Request) -> Any:
    """The JSON body; one that is not JSON is a vLLM-style 400."""
    try:
        return await request.json()
    except ValueError as exc:
        raise ProtocolError(
            f"1 validation error:\n  body: JSON decode error ({exc})", err_type="Bad Request"
        ) from exc
