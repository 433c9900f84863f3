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
    SampledTurn,
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
from agentroll.server.schema.messages import ChatMessage, ChatToolCall, ToolSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "AgentError",
    "AgentHandler",
    "AgentSession",
    "ChatMessage",
    "ChatToolCall",
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
    "SampledTurn",
    "ToolSpec",
    "Turn",
    "UndeclaredAgent",
    "UnknownHandlerError",
    "UnservableRequest",
    "classify_error",
]
