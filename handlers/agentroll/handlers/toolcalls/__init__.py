"""Tool-call parsers: turn one model reply into content, calls and readable errors.

Pick the parser a job's model was trained on (`get_parser("hermes" | "qwen3_coder" |
"llama3_json")`, names as in vLLM's `--tool-call-parser`), call `parse(text)` on each reply,
run `reply.calls`, and send `error_observation(reply, parser.format_hint)` back for malformed
ones. Parsers never raise on model output and never touch tokens.
"""

from agentroll.handlers.toolcalls.base import (
    DuplicateParserError,
    ParsedReply,
    RendersToolCalls,
    SchemaAwareParser,
    ToolCall,
    ToolCallParser,
    ToolSchema,
    UnknownParserError,
)
from agentroll.handlers.toolcalls.hermes import HermesParser
from agentroll.handlers.toolcalls.llama3_json import Llama3JsonParser
from agentroll.handlers.toolcalls.qwen3_coder import Qwen3CoderParser
from agentroll.handlers.toolcalls.registry import (
    BUILTIN_PARSERS,
    DEFAULT_PARSER,
    ENTRY_POINT_GROUP,
    ParserRegistry,
    get_parser,
    parser_names,
    register_parser,
)
from agentroll.handlers.toolcalls.render import (
    assistant_message,
    error_observation,
    openai_tool_call,
    tool_message,
)

__all__ = [
    "BUILTIN_PARSERS",
    "DEFAULT_PARSER",
    "ENTRY_POINT_GROUP",
    "DuplicateParserError",
    "HermesParser",
    "Llama3JsonParser",
    "ParsedReply",
    "ParserRegistry",
    "Qwen3CoderParser",
    "RendersToolCalls",
    "SchemaAwareParser",
    "ToolCall",
    "ToolCallParser",
    "ToolSchema",
    "UnknownParserError",
    "assistant_message",
    "error_observation",
    "get_parser",
    "openai_tool_call",
    "parser_names",
    "register_parser",
    "tool_message",
]
