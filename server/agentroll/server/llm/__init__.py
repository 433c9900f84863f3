"""Token-in/token-out access to the trainer's inference servers."""

from agentroll.server.llm.http import HTTPClient, HTTPResponse, HTTPTimeout, HTTPTransportError
from agentroll.server.llm.pool import Backend, BackendPool
from agentroll.server.llm.session import TokenSession
from agentroll.server.llm.vllm import BackendError, Completion, VLLMClient

__all__ = [
    "Backend",
    "BackendError",
    "BackendPool",
    "Completion",
    "HTTPClient",
    "HTTPResponse",
    "HTTPTimeout",
    "HTTPTransportError",
    "TokenSession",
    "VLLMClient",
]
