"""Settings of the scripted LLM backend (one pydantic model, documented field by field)."""

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentroll.testing.scripted_llm.logprob_modes import ScriptedLogprobsMode

VllmVersion = Literal["0.11", "0.2x", "0.33"]
SGLangVersion = Literal["0.5.2", "0.5.23"]
Flavor = Literal["vllm", "sglang"]

# What `/version` reports for each protocol family the double imitates.
RELEASE_OF: dict[str, str] = {"0.11": "0.11.0", "0.2x": "0.26.0", "0.33": "0.33.0"}


class MoERouting(BaseModel):
    """The shape of a mixture-of-experts model's routing."""

    model_config = ConfigDict(extra="forbid")

    num_layers: int = Field(default=2, ge=1)
    num_experts: int = Field(default=8, ge=1, le=65_536)
    top_k: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> "MoERouting":
        if self.top_k > self.num_experts:
            raise ValueError("top_k cannot exceed num_experts")
        return self


class ScriptedLLMConfig(BaseModel):
    """How the scripted backend behaves. Everything is deterministic given these values."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["scripted"] = "scripted"
    flavor: Flavor = "vllm"
    """Which server to imitate: vLLM's HTTP API, or SGLang's native API (`/generate`)."""
    version: VllmVersion = "0.33"
    """vLLM protocol family to imitate (context-length rules, pause semantics, shapes)."""
    release: str | None = None
    """What vLLM's `/version` reports; default: the family's reference release (0.11.0,
    0.26.0, 0.33.0). Must belong to `version`'s family, e.g. "0.14.0" for "0.2x" (a release
    before 0.20 takes `/pause?wait_for_inflight_requests=` instead of `mode=`)."""
    sglang_version: SGLangVersion = "0.5.23"
    """SGLang release to imitate (flavor "sglang" only): 0.5.2 has no `/tokenize` and its
    pause always aborts; 0.5.23 rejects unknown `sampling_params` keys."""
    tokenizer_path: str | None = None
    """SGLang's `tokenizer_path` in `/get_model_info` (default: the model name, as for a hub
    id). Point it at a directory written by `export_tokenizer` to let clients load it."""
    model: str = "policy"
    """The one served model name; requests naming another model get 404."""
    max_model_len: int = Field(default=8192, ge=16)
    policy: list[str] = Field(
        default_factory=lambda: ["echo", "swe", "code", "stem", "verify", "math"]
    )
    """Rule names tried in order (see `policy.RULES`); the `default` rule ends every chain.
    A comma-separated string is accepted too (`"echo,math"`)."""
    wrong_rate: float = Field(default=0.3, ge=0.0, le=1.0)
    """Probability that the `math` rule boxes a wrong answer (decided from seed + prompt)."""
    chat_template: Literal["chatml", "qwen3"] = "chatml"
    """`qwen3` drops `<think>` blocks of earlier turns when rendering (not prefix-stable)."""
    thinking: bool = False
    """Replies start with a `<think>...</think>` block, as reasoning models' do."""
    split_rate: float = Field(default=0.15, ge=0.0, le=1.0)
    """Probability that a merged token of the reply is emitted as two shorter tokens."""
    seed: int = 0
    """Server seed, mixed into every request's randomness."""
    latency_s: float = Field(default=0.0, ge=0.0)
    """Simulated generation time per request (spread over its tokens; pause-aware)."""
    resume_delay_s: float = Field(default=0.0, ge=0.0)
    """How long `/resume` takes before the engine resumes and answers (a slow engine)."""
    fail_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Fraction of completion requests answered with HTTP 500 (engine error)."""
    healthy: bool = True
    out_of_vocab: Literal["refuse", "fail", "crash"] = "refuse"
    """A prompt id outside `[0, vocab)`: `refuse` it with 400 (vLLM's check of the top id),
    `fail` the request with 500 (an engine that indexes its embeddings unchecked, as older
    vLLM answers a negative id), or `crash`: the engine dies, as SGLang's scheduler does (every
    later request fails and `/health` answers 503)."""
    failing_stop: str | None = None
    """A stop string holding this text makes the engine answer 500, as an engine fails on some
    sampling input (red-team tests: a control request must carry none of the caller's)."""
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
    logprobs_mode: ScriptedLogprobsMode = "raw_logprobs"
    """`--logprobs-mode` (a server setting, as in vLLM): raw logprobs, or processed after
    temperature, top-k and top-p (`logprob_modes.py`). vLLM's `/server_info` reports it (the
    0.2x and 0.33 families, which model a dev-mode server)."""
    moe: MoERouting | None = None
    """Serve a mixture-of-experts model with `--enable-return-routed-experts`: completions
    carry `routed_experts` (`routing.py`). None: a dense model (`routed_experts` null)."""

    @model_validator(mode="after")
    def _flavor_fields(self) -> "ScriptedLLMConfig":
        vllm_only = {"version", "release"} & self.model_fields_set
        if self.flavor == "sglang" and vllm_only:
            raise ValueError(f"{sorted(vllm_only)} apply to flavor 'vllm' only")
        if self.flavor == "vllm" and {"sglang_version", "tokenizer_path"} & self.model_fields_set:
            raise ValueError("sglang_version and tokenizer_path apply to flavor 'sglang' only")
        if self.flavor == "vllm" and self.version == "0.11" and self.moe is not None:
            raise ValueError("routed experts are returned from vLLM 0.2x on")
        if self.release is not None and family_of_release(self.release) != self.version:
            raise ValueError(f"release {self.release} is not in the {self.version} family")
        return self

    @property
    def reported_release(self) -> str:
        return self.release or RELEASE_OF[self.version]

    @field_validator("policy", mode="before")
    @classmethod
    def _split_policy(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


def family_of_release(release: str) -> VllmVersion | None:
    """The family of a release string ("0.14.0" -> "0.2x"); None when unreadable."""
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)$", release)
    if match is None:
        return None
    key = tuple(int(g) for g in match.groups())
    if key < (0, 12, 0):
        return "0.11"
    return "0.2x" if key < (0, 33, 0) else "0.33"
