"""A reusable tool-calling agent loop, its tools, and a handler base class built on it.

from agentroll.handlers.agent import ToolAgentHandler      # subclass for a task family
from agentroll.handlers.agent import AgentLoop, AgentConfig  # or drive the loop yourself
"""

from agentroll.handlers.agent.config import TOOL_NAMES, AgentConfig
from agentroll.handlers.agent.handler import DEFAULT_LIMITS, ToolAgentHandler
from agentroll.handlers.agent.loop import STATE_KEY, AgentLoop, AgentRun
from agentroll.handlers.agent.tools import (
    BashTool,
    EditorTool,
    PythonTool,
    SubmitTool,
    Tool,
    build_tools,
    check_arguments,
)

__all__ = [
    "DEFAULT_LIMITS",
    "STATE_KEY",
    "TOOL_NAMES",
    "AgentConfig",
    "AgentLoop",
    "AgentRun",
    "BashTool",
    "EditorTool",
    "PythonTool",
    "SubmitTool",
    "Tool",
    "ToolAgentHandler",
    "build_tools",
    "check_arguments",
]
