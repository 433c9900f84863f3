"""The wire formats a rollout's proxy speaks, and which one a request path belongs to.

Every chat-style API is the same call underneath: a conversation and tools in, one sampled
assistant turn out. Each `WireAPI` translates its own request into a `ChatRequest` (messages
and tools in the OpenAI chat shape, which is what chat templates are rendered from), and the
sampled `ChatReply` back into its own response body or event stream, and answers errors in
its own envelope, so a client's error handling sees what the real service would send.

    openai_chat        POST /v1/chat/completions                  (openai_api.py)
    openai_responses   POST /v1/responses                         (responses_api.py)
    anthropic          POST /v1/messages                          (anthropic_api.py)
                       and /v1/messages/count_tokens
    google             POST /v1beta/models/{model}:generateContent (google_api.py)
                       and :streamGenerateContent

Adding a format = one module with a `WireAPI` class and its entry in `apis.APIS`.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentroll.server.proxy.http11 import BadRequest, Request, Response
from agentroll.server.schema.messages import ChatMessage, ToolSpec

MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 1000


def check_stop(stop: Sequence[str]) -> None:
    """Refuse more stop strings, or longer ones, than a harness needs (OpenAI and Gemini take
    4 and 5): an engine matches each against every token it samples, so a flood of them
    slows every rollout that engine serves."""
    if len(stop) > MAX_STOP_STRINGS:
        raise BadRequest(f"at most {MAX_STOP_STRINGS} stop strings are taken, got {len(stop)}")
    longest = max(map(len, stop), default=0)
    if longest > MAX_STOP_CHARS:
        raise BadRequest(f"a stop string is at most {MAX_STOP_CHARS} characters, got {longest}")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat call, whatever its wire format: what recording needs from it."""

    messages: list[ChatMessage]
    """The conversation in the OpenAI chat shape (system, user, assistant + tool_calls, tool)."""
    tools: list[ToolSpec]
    """Tool definitions in the OpenAI shape: `{"type": "function", "function": {...}}`."""
    parse_tools: bool
    """Whether the reply is parsed for tool calls (tools offered and not switched off)."""
    stream: bool
    include_usage: bool
    max_tokens: int | None
    stop: list[str]
    model: str = ""
    """The model name the client asked for (echoed back where the format echoes it)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Format-specific details its answer needs (e.g. a Responses request's `store`)."""
    count_only: bool = False
    """Only the prompt's token count is asked for (Anthropic's `count_tokens`): nothing is
    sampled, and `answer` gets a turn with no reply whose `prompt_tokens` is the count."""

    def __post_init__(self) -> None:
        check_stop(self.stop)


@dataclass(frozen=True, slots=True)
class ChatReply:
    """The sampled assistant turn, ready to be written in any format."""

    call_id: str
    model: str
    message: ChatMessage
    """`{"role": "assistant", "content": str | None, "tool_calls": [...]}` (OpenAI shape)."""
    finish: str
    """`stop`, `length` or `tool_calls`."""
    prompt_tokens: int
    completion_tokens: int


class WireAPI(Protocol):
    name: str

    def matches(self, method: str, path: str) -> bool:
        """Whether this format serves `method path` (the path with any `/v1` prefix kept)."""
        ...

    def credential(self, headers: dict[str, str]) -> str:
        """The API key the request carries, as this format's clients send it."""
        ...

    def parse(self, request: Request) -> ChatRequest:
        """The call; `BadRequest` says what is wrong with it."""
        ...

    def answer(self, turn: ChatReply, request: ChatRequest) -> Response:
        """The turn as this format's response (a body, or an event stream if asked)."""
        ...

    def error(
        self, status: int, message: str, type_: str, code: str | None = None
    ) -> dict[str, Any]:
        """This format's error envelope; `type_`/`code` are OpenAI's names for the error."""
        ...


def bearer_or(headers: dict[str, str], *names: str) -> str:
    """`Authorization: Bearer KEY`, else the first of the named key headers present."""
    given = headers.get("authorization", "")
    token = given[7:].strip() if given[:7].lower() == "bearer " else ""
    return token or next((headers[n] for n in names if headers.get(n)), "")


def route(apis: Sequence[WireAPI], method: str, path: str) -> WireAPI | None:
    return next((api for api in apis if api.matches(method, path)), None)
