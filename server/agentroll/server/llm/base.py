"""What every inference-backend client offers, whatever its wire protocol.

`VLLMClient` (vllm.py) and `SGLangClient` (sglang.py) both satisfy `BackendClient`;
`registry.make_client(kind, ...)` builds the right one. Results use vLLM's vocabulary
(finish reasons `stop` / `length` / `abort`), so callers never branch on the backend kind.

Errors raised by clients (plus `ContextLengthExceeded` from the handlers package), a branch
of the server's tree (`agentroll.server.errors`):

    ServerError
     └── BackendError(ServerError, RuntimeError)    a call failed; `.retryable`, `.status`
          ├── BackendPaused(BackendError)           refused because generation is paused
          │                                         (vLLM 0.33 answers 503); always retryable
          └── PauseUnsupported(BackendError, NotImplementedError)
                                                    the server has no pause/resume control
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentroll.server.errors import (
    BackendError,  # noqa: F401 (re-exported: its old import path)
    BackendPaused,  # noqa: F401 (re-exported: its old import path)
    PauseUnsupported,  # noqa: F401 (re-exported: its old import path)
)
from agentroll.server.llm.routed import Routing
from agentroll.server.schema import LogprobsMode, PauseMode
from agentroll.server.schema.messages import ChatMessage, ToolSpec


@dataclass(frozen=True, slots=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    """vLLM vocabulary: `stop`, `length`, `abort` (SGLang's objects are mapped onto it)."""
    prompt_tokens: int
    weight_versions: list[tuple[str, int, int]] | None = None
    """(version, start, end) half-open ranges over `token_ids` when the backend reports which
    weights produced which tokens (vLLM 0.33 `return_weight_versions`); otherwise None."""
    routing: Routing | None = None
    """MoE routed experts of the tokens the engine read (llm/routed.py), where it returned them."""


@dataclass(frozen=True, slots=True)
class TokenizeResult:
    token_ids: list[int]
    max_model_len: int | None


@runtime_checkable
class BackendClient(Protocol):
    """Token-in/token-out access to one inference server."""

    base_url: str
    model: str | None

    async def vocab_size(self) -> int | None:
        """Token ids the model reads are below this (from its tokenizer); None: unknown."""
        ...

    async def tokenize_messages(
        self,
        messages: list[ChatMessage],
        tools: list[ToolSpec] | None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
        timeout_s: float = 60.0,
    ) -> TokenizeResult: ...

    async def complete(
        self,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        *,
        timeout_s: float,
        routing_from: int | None = None,
    ) -> Completion:
        """`routing_from`: ask for MoE routed experts from that prompt position on (a backend
        that cannot give them answers without)."""
        ...

    async def logprobs_mode(self, *, timeout_s: float = 10.0) -> LogprobsMode | None:
        """What the server says its logprobs are; None where it cannot tell."""
        ...

    async def pause(self, mode: PauseMode = "wait", *, timeout_s: float = 300.0) -> None: ...

    async def resume(self, *, timeout_s: float = 60.0) -> None: ...


class ChatTokenizer(Protocol):
    """A client-side chat template + tokenizer (for servers that cannot render templates)."""

    max_model_len: int | None
    vocab_size: int
    """Every id the tokenizer knows, added tokens included."""

    def encode_messages(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
    ) -> list[int]: ...
