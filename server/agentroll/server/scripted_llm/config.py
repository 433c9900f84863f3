"""Settings of the scripted LLM backend (one pydantic model, documented field by field)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

VllmVersion = Literal["0.11", "0.2x", "0.33"]

# What `/version` reports for each protocol family the double imitates.
RELEASE_OF: dict[str, str] = {"0.11": "0.11.0", "0.2x": "0.26.0", "0.33": "0.33.0"}


class ScriptedLLMConfig(BaseModel):
    """How the scripted backend behaves. Everything is deterministic given these values."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["scripted"] = "scripted"
    version: VllmVersion = "0.33"
    """vLLM protocol family to imitate (context-length rules, pause semantics, shapes)."""
    model: str = "policy"
    """The one served model name; requests naming another model get 404."""
    max_model_len: int = Field(default=8192, ge=16)
    policy: list[str] = Field(default_factory=lambda: ["echo", "math"])
    """Rule names tried in order (see `policy.RULES`); the `default` rule ends every chain.
    A comma-separated string is accepted too (`"echo,math"`)."""
    wrong_rate: float = Field(default=0.3, ge=0.0, le=1.0)
    """Probability that the `math` rule boxes a wrong answer (decided from seed + prompt)."""
    split_rate: float = Field(default=0.15, ge=0.0, le=1.0)
    """Probability that a merged token of the reply is emitted as two shorter tokens."""
    seed: int = 0
    """Server seed, mixed into every request's randomness."""
    latency_s: float = Field(default=0.0, ge=0.0)
    """Simulated generation time per request (spread over its tokens; pause-aware)."""
    fail_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Fraction of completion requests answered with HTTP 500 (engine error)."""
    healthy: bool = True
    """When false `/health` is 503 and generation fails with 500, as for a dead engine."""
    max_logprobs: int = Field(default=20, ge=0)
    """`--max-logprobs`: cap on the `logprobs` request field."""
    max_batch_prompts: int = Field(default=1024, ge=1)
    """Cap on prompts per completions request (`VLLM_MAX_COMPLETION_PROMPTS`)."""
    kv_cache_tokens: int = Field(default=262_144, ge=1)
    """Simulated KV cache size; `vllm:kv_cache_usage_perc` is running tokens / this."""
    request_log_size: int = Field(default=2048, ge=0)
    """How many finished choices `GET /scripted/requests` remembers (oldest dropped)."""
    weight_version: str = "0"
    """Initial weight version label (0.33 `return_weight_versions`, `/weight_info`)."""

    @field_validator("policy", mode="before")
    @classmethod
    def _split_policy(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value
