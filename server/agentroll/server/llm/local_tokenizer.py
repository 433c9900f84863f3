"""A chat template + tokenizer run inside agentroll, for servers that cannot render templates.

SGLang 0.5.2 has no `/tokenize` and 0.5.23's has no `continue_final_message` (docs/protocol.md
§9.3), so an SGLang backend's template deltas are rendered here from the model's own files: a
Hugging Face `tokenizer.json` plus the `chat_template` of `tokenizer_config.json` (or a
`chat_template.jinja` beside it) -- the directory SGLang reports as `tokenizer_path`.

Rendering follows `transformers.apply_chat_template`: a sandboxed jinja2 environment with
`trim_blocks`/`lstrip_blocks`, the `tojson` filter, `raise_exception`, special tokens as
variables; `continue_final_message` renders the conversation closed and cuts it right after
the final message's content.
"""

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from agentroll.server.errors import TemplateRenderError
from agentroll.server.schema.messages import ChatMessage, ToolSpec

BOTH_PROMPT_FLAGS = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise(message: str) -> None:
    raise TemplateError(message)


def _token_text(value: Any) -> str | None:
    """tokenizer_config stores special tokens as strings or `{"content": ...}` objects."""
    if isinstance(value, Mapping):
        return str(value.get("content", ""))
    return None if value is None else str(value)


class LocalChatTokenizer:
    """Satisfies `base.ChatTokenizer`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat_template: str,
        *,
        special_tokens: Mapping[str, str | None] | None = None,
        max_model_len: int | None = None,
    ) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(chat_template)
        self._tokenizer = tokenizer
        self._special = dict(special_tokens or {})
        self.max_model_len = max_model_len
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_dir(
        cls, path: str | Path, *, max_model_len: int | None = None
    ) -> "LocalChatTokenizer":
        """Load `tokenizer.json` + `tokenizer_config.json` (+ optional `chat_template.jinja`)."""
        root = Path(path)
        config: dict[str, Any] = {}
        if (root / "tokenizer_config.json").is_file():
            config = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
        template: Any = config.get("chat_template")
        if (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")
        if isinstance(template, list):  # named templates: use "default"
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default")
        if not isinstance(template, str):
            raise FileNotFoundError(f"no chat template in {root}")
        special = {
            key: _token_text(config.get(key))
            for key in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        return cls(tokenizer, template, special_tokens=special, max_model_len=max_model_len)

    def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
    ) -> str:
        if add_generation_prompt and continue_final_message:
            raise TemplateRenderError(BOTH_PROMPT_FLAGS)
        try:
            text = self._template.render(
                messages=list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                **self._special,
            )
        except (TemplateError, TypeError, ValueError) as exc:
            raise TemplateRenderError(f"chat template failed: {exc}") from exc
        if continue_final_message:
            text = self._cut_after_final(text, messages)
        return text

    @staticmethod
    def _cut_after_final(text: str, messages: Sequence[ChatMessage]) -> str:
        final = messages[-1].get("content") if messages else None
        if isinstance(final, list):  # content parts: the last text part
            final = final[-1].get("text") if final else ""
        if not isinstance(final, str):
            raise TemplateRenderError("continue_final_message needs a final message with text")
        for needle in (final, final.strip()):
            at = text.rfind(needle)
            if at >= 0:
                return text[: at + len(needle)]
        raise TemplateRenderError("the final message's content does not appear in the render")

    def encode_messages(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        *,
        add_generation_prompt: bool,
        continue_final_message: bool = False,
    ) -> list[int]:
        text = self.render(
            messages,
            tools,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        )
        # The template writes BOS itself where the model wants one (as vLLM/SGLang do).
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)
