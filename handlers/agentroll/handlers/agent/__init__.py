"""A reusable tool-calling agent loop, its tools, and a handler base class built on it.

from agentroll.handlers.agent import ToolAgentHandler      # subclass for a task family
from agentroll.handlers.agent import AgentLoop, AgentConfig  # or drive the loop yourself
"""

from agentroll.handlers.agent.config import TOOL_NAMES, AgentConfig
from agentroll.handlers.agent.final_answer import (
    ANSWER_TOOLS,
    SUBMIT_ANSWER_PROMPT,
    FinalAnswer,
    no_answer,
    whole_reply,
)
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
    "ANSWER_TOOLS",
    "DEFAULT_LIMITS",
    "STATE_KEY",
    "SUBMIT_ANSWER_PROMPT",
    "TOOL_NAMES",
    "AgentConfig",
    "AgentLoop",
    "AgentRun",
    "BashTool",
    "EditorTool",
    "FinalAnswer",
    "PythonTool",
    "SubmitTool",
    "Tool",
    "ToolAgentHandler",
    "build_tools",
    "check_arguments",
    "no_answer",
    "whole_reply",
]
