"""Token-in/token-out access to the trainer's inference servers (vLLM, SGLang)."""

from agentroll.server.llm.backend_pool import Backend, BackendPool
from agentroll.server.llm.base import BackendClient, BackendError, Completion, TokenizeResult
from agentroll.server.llm.http import HTTPClient, HTTPResponse, HTTPTimeout, HTTPTransportError
from agentroll.server.llm.registry import make_client
from agentroll.server.llm.session import TokenSession
from agentroll.server.llm.sglang import SGLangClient
from agentroll.server.llm.vllm import VLLMClient

__all__ = [
    "Backend",
    "BackendClient",
    "BackendError",
    "BackendPool",
    "Completion",
    "HTTPClient",
    "HTTPResponse",
    "HTTPTimeout",
    "HTTPTransportError",
    "SGLangClient",
    "TokenSession",
    "TokenizeResult",
    "VLLMClient",
    "make_client",
]
