"""ChatML chat template (Qwen2.5 style), rendered with a sandboxed jinja2 environment.

The template also renders raw OpenAI messages (`tool_calls[].function`, null content) so that
it works unchanged as a Hugging Face `chat_template` (see `export.py`).

`ChatTemplate.render` turns OpenAI-style messages into prompt text; `parse_chatml` is its
inverse, used by the policy to read a conversation back out of prompt token ids.
"""

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from agentroll.testing.scripted_llm.tokenizer import ScriptedTokenizer, get_tokenizer

CHATML_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages and messages[0].role == 'system' %}
{{- (messages[0].content or '') + '\n\n' }}
{%- endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and ' }}
{{- 'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + (messages[0].content or '') + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if loop.first and message.role == 'system' %}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
{{- '<|im_start|>user' }}
{%- endif %}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
{%- if not (loop.last and continue_final_message) %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') }}
{%- for call in (message.tool_calls or []) %}
{%- set call = call.function if call.function is defined else call %}
{%- if message.content or not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n{"name": ' + (call.name | tojson) + ', "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}
{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- if not (loop.last and continue_final_message) %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""

BOTH_PROMPT_FLAGS = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."


def _tojson(value: Any) -> str:
    # HF's override of jinja's html-escaping tojson: plain JSON, non-ASCII kept.
    return json.dumps(value, ensure_ascii=False)


def _text_of(content: Any) -> str:
    """Message content as text: a string, null, or a list of OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    raise ValueError(f"unsupported message content: {type(content).__name__}")


def _normalise(message: Mapping[str, Any]) -> dict[str, Any]:
    if "role" not in message:
        raise ValueError("every message needs a 'role'")
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)  # OpenAI nests name/arguments under "function"
        calls.append({"name": fn.get("name", ""), "arguments": fn.get("arguments", {})})
    return {
        "role": str(message["role"]),
        "content": _text_of(message.get("content")),
        "tool_calls": calls,
    }


_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def _drop_past_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Qwen3's rule: reasoning is kept only for assistant turns after the last user query."""
    last_query = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    return [
        {**m, "content": _THINK.sub("", m["content"] or "")}
        if m["role"] == "assistant" and i < last_query
        else m
        for i, m in enumerate(messages)
    ]


class ChatTemplate:
    """The compiled template (compile once; rendering is the only per-request work).

    `drop_past_thinking` imitates Qwen3-style templates, which are not prefix-stable: an
    assistant turn renders with its `<think>` block while it is the latest, without it once a
    new user message follows.
    """

    def __init__(
        self,
        tokenizer: ScriptedTokenizer,
        source: str = CHATML_TEMPLATE,
        *,
        drop_past_thinking: bool = False,
    ) -> None:
        env = ImmutableSandboxedEnvironment(autoescape=False, keep_trailing_newline=True)
        env.filters["tojson"] = _tojson
        self._template = env.from_string(source.strip())
        self.tokenizer = tokenizer
        self.drop_past_thinking = drop_past_thinking

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
    ) -> str:
        if add_generation_prompt and continue_final_message:
            raise ValueError(BOTH_PROMPT_FLAGS)
        if continue_final_message and not messages:
            raise ValueError("continue_final_message needs at least one message")
        normalised = [_normalise(m) for m in messages]
        if self.drop_past_thinking:
            normalised = _drop_past_thinking(normalised)
        return self._template.render(
            messages=normalised,
            tools=list(tools or []),
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        )

    def encode(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
    ) -> list[int]:
        """Render, then tokenize with special tokens parsed from the text (no BOS added)."""
        text = self.render(messages, tools, add_generation_prompt, continue_final_message)
        return self.tokenizer.encode(text)


@functools.cache
def get_chat_template(style: str = "chatml") -> ChatTemplate:
    """The process-wide template bound to `get_tokenizer()`: `chatml` (Qwen2.5-like, prefix
    stable) or `qwen3` (drops the reasoning of earlier turns)."""
    if style not in ("chatml", "qwen3"):
        raise ValueError(f"unknown chat template style {style!r}; known: chatml, qwen3")
    return ChatTemplate(get_tokenizer(), drop_past_thinking=style == "qwen3")


@dataclass(slots=True)
class PromptTurn:
    """One turn read back from prompt text."""

    role: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = True
    """False for the last, still open turn (e.g. the generation prompt)."""


ChatMessage = PromptTurn
"""Its first name, kept for code that imports it (the conversation's `ChatMessage` is the
typed dict in `agentroll.server.schema.messages`)."""


_TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
_TOOL_RESPONSE = re.compile(r"\n?<tool_response>\n(.*?)\n</tool_response>", re.S)


def parse_chatml(text: str) -> list[PromptTurn]:
    """Split ChatML prompt text into messages. Tool-response user turns become `tool`
    messages, tool-call blocks in assistant turns become `tool_calls` (best effort)."""
    messages: list[PromptTurn] = []
    for chunk in text.split("<|im_start|>")[1:]:
        header, _, body = chunk.partition("\n")
        content, closed, _ = body.partition("<|im_end|>")
        role = header.strip()
        responses = _TOOL_RESPONSE.findall(content) if role == "user" else []
        if responses and not _TOOL_RESPONSE.sub("", content).strip():
            messages.extend(PromptTurn("tool", r, complete=bool(closed)) for r in responses)
            continue
        calls: list[dict[str, Any]] = []
        if role == "assistant":
            for raw in _TOOL_CALL.findall(content):
                try:
                    calls.append(json.loads(raw))
                except ValueError:
                    calls.append({"name": None, "arguments": raw})
        messages.append(PromptTurn(role, content, calls, complete=bool(closed)))
    return messages
