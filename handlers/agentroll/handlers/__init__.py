"""agentroll handler SDK: write a task family as an `AgentHandler` plugin.

The server drives each rollout through `init` (sandbox, tools), `run` (the agent loop
against `ctx.llm`) and `eval` (the reward); see `agentroll.handlers.base`.
"""

from agentroll.handlers.base import AgentHandler, ErrorDecision, classify_error
from agentroll.handlers.context import (
    AgentSession,
    JudgeReply,
    LLMProxy,
    LLMSession,
    Message,
    ProxyLimits,
    ProxyStop,
    Reward,
    RolloutContext,
    Turn,
)
from agentroll.handlers.errors import (
    AgentError,
    ContextLengthExceeded,
    DuplicateHandlerError,
    HandlerError,
    InfraError,
    LLMUnavailable,
    RegistryError,
    UndeclaredAgent,
    UnknownHandlerError,
    UnservableRequest,
)
from agentroll.handlers.plugins import PluginRegistry
from agentroll.handlers.registry import ENTRY_POINT_GROUP, HandlerRegistry

__all__ = [
    "ENTRY_POINT_GROUP",
    "AgentError",
    "AgentHandler",
    "AgentSession",
    "ContextLengthExceeded",
    "DuplicateHandlerError",
    "ErrorDecision",
    "HandlerError",
    "HandlerRegistry",
    "InfraError",
    "JudgeReply",
    "LLMProxy",
    "LLMSession",
    "LLMUnavailable",
    "Message",
    "PluginRegistry",
    "ProxyLimits",
    "ProxyStop",
    "RegistryError",
    "Reward",
    "RolloutContext",
    "Turn",
    "UndeclaredAgent",
    "UnknownHandlerError",
    "UnservableRequest",
    "classify_error",
]
