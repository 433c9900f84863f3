"""LLM inference backends as the trainer registers them."""

from enum import StrEnum

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from agentroll.server.schema.jobs import DEFAULT_POLICY, IDENTIFIER
from agentroll.server.schema.trajectory import LogprobsMode


class BackendKind(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


class BackendSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, pattern=IDENTIFIER, description="Chosen by the server if absent.")
    kind: BackendKind = BackendKind.vllm
    base_url: AnyHttpUrl
    model: str | None = Field(None, max_length=256, description="Served model name to request.")
    tags: list[str] = Field(default_factory=list, max_length=32)
    policy: str = Field(
        DEFAULT_POLICY,
        pattern=IDENTIFIER,
        description="The policy whose weights it serves: only agents of that policy use it.",
    )
    max_concurrency: int = Field(1024, ge=1, le=100_000)
    tokenizer_path: str | None = Field(
        None,
        max_length=4096,
        description="A Hugging Face tokenizer directory on this host, used to render chat "
        "templates locally (needed for SGLang, whose /tokenize cannot continue a message).",
    )
    logprobs_mode: LogprobsMode | None = Field(
        None,
        description="What its logprobs are (the server's `--logprobs-mode`). agentroll also "
        "asks a vLLM server (`/server_info`, dev mode): a declaration it contradicts is refused, "
        "and where neither says, trajectories declare the mode unknown (null).",
    )


class BackendView(BaseModel):
    id: str
    kind: BackendKind
    base_url: str
    model: str | None
    tags: list[str]
    policy: str = DEFAULT_POLICY
    max_concurrency: int
    in_flight: int
    requests_total: int
    failures_total: int
    healthy: bool = Field(description="Passing health checks; unhealthy backends get no requests.")
    draining: bool = Field(description="Getting no new requests; removed once idle.")
    last_error: str | None = None
    logprobs_mode: LogprobsMode | None = Field(
        None, description="Declared or learnt from the server; null while unknown."
    )
