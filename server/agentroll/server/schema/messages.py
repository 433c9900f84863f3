"""The conversation's types: chat messages, tool calls and tool specs, in OpenAI's shape.

One home shared by the server, the handlers and the trainer clients (the handlers may import
this module of the server's schema and no other: it holds types only). `TypedDict`s cost
nothing at run time (a message is still a plain `dict`, built and read at dict speed on the
hot path) while mypy checks every key and value a module writes or reads.

    ChatMessage   {"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}
    ChatToolCall  {"id", "type": "function", "function": FunctionCall}
    FunctionCall  {"name", "arguments"}          arguments: a JSON object as text
    ToolSpec      {"type": "function", "function": FunctionSpec}
    FunctionSpec  {"name", "description"?, "parameters"?, "strict"?}

The LLM proxy's wire translators (OpenAI chat and Responses, Anthropic, Google) convert each
format to and from `ChatMessage`; a trajectory's `messages` and `tools` hold these shapes.
"""

from typing import Any, Literal, NotRequired, Required, TypedDict

Role = Literal["system", "developer", "user", "assistant", "tool"]
ContentParts = list[dict[str, Any]]
"""A message's content as parts: `{"type": "text", "text": ...}`, images, ..."""


class FunctionCall(TypedDict):
    name: str
    arguments: str
    """The arguments as a JSON object's text, as the model wrote them (parsed by the agent)."""


class ChatToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    role: Required[Role]
    content: Required[str | ContentParts | None]
    """Text, or content parts (`{"type": "text", "text": ...}`, images); None on an
    assistant turn that only calls tools."""
    tool_calls: list[ChatToolCall]
    """An assistant turn's calls, in the order the model made them."""
    tool_call_id: str
    """A tool result: the call it answers."""
    name: str
    """A tool result: the tool's name (some chat templates render it)."""
    reasoning_content: str
    """An assistant turn's reasoning, where a reasoning parser or a handler kept it apart
    from `content` (the ATIF export writes it to the agent's step)."""


class FunctionSpec(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[dict[str, Any]]
    """A JSON Schema of the arguments object."""
    strict: NotRequired[bool]


class ToolSpec(TypedDict):
    type: Literal["function"]
    function: FunctionSpec
