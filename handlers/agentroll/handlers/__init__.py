"""agentroll handler SDK: write a task family as an `AgentHandler` plugin.

The server drives each rollout through `init` (sandbox, tools), `run` (the agent loop
against `ctx.llm`) and `eval` (the reward); see `agentroll.handlers.base`. A task
(`agentroll.handlers.agent.ToolAgentHandler`) runs under its default agent or under any
`Agent` a job names (`agentroll.handlers.agents`, composed by `ComposedHandler`).
"""

from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.base import AgentHandler, ErrorDecision, classify_error
from agentroll.handlers.compose import ComposedHandler
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
    UnknownAgentError,
    UnknownHandlerError,
    UnservableRequest,
)
from agentroll.handlers.plugins import PluginRegistry
from agentroll.handlers.registry import (
    AGENT_ENTRY_POINT_GROUP,
    ENTRY_POINT_GROUP,
    AgentRegistry,
    HandlerRegistry,
)
from agentroll.server.schema.messages import ChatMessage, ChatToolCall, ToolSpec

__all__ = [
    "AGENT_ENTRY_POINT_GROUP",
    "ENTRY_POINT_GROUP",
    "Agent",
    "AgentError",
    "AgentHandler",
    "AgentRegistry",
    "AgentResult",
    "AgentSession",
    "ChatMessage",
    "ChatToolCall",
    "ComposedHandler",
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
    "UnknownAgentError",
    "UnknownHandlerError",
    "UnservableRequest",
    "classify_error",
]
