"""Scripted LLM backend: a GPU-free, protocol-faithful stand-in for a vLLM or SGLang server.

A named fake, used by tests, benchmarks and the demo wherever no GPU is available. It speaks
vLLM's HTTP protocol (versions 0.11, 0.2x and 0.33; see docs/protocol.md §10) or, with
`flavor="sglang"`, SGLang's native API (0.5.2 and 0.5.23: `/generate`, ...) with a
real byte-level BPE tokenizer trained at start-up, a ChatML chat template, and scripted
policies (`math`, `echo`, `default`) whose sampled ids are deliberately non-canonical:
`decode(ids) == text` but `encode(decode(ids)) != ids`.

    app = create_app(ScriptedLLMConfig(version="0.33", latency_s=0.5))   # in-process
    app = create_app(ScriptedLLMConfig(flavor="sglang", sglang_version="0.5.2"))
    agentroll scripted-llm --port 8001 --latency-s 0.5                    # as a server

Importing this package is cheap: the tokenizer is trained on first use (`get_tokenizer()`).
"""

from agentroll.testing.scripted_llm.app import create_app
from agentroll.testing.scripted_llm.config import (
    Flavor,
    ScriptedLLMConfig,
    SGLangVersion,
    VllmVersion,
)
from agentroll.testing.scripted_llm.errors import (
    DuplicateRuleError,
    ProtocolError,
    ScriptedLLMError,
    UnknownRuleError,
)
from agentroll.testing.scripted_llm.export import export_tokenizer
from agentroll.testing.scripted_llm.policy import (
    Conversation,
    Policy,
    Reply,
    Rule,
    RuleContext,
    RuleRegistry,
    default_rules,
)
from agentroll.testing.scripted_llm.template import (
    ChatMessage,
    ChatTemplate,
    PromptTurn,
    get_chat_template,
    parse_chatml,
)
from agentroll.testing.scripted_llm.tokenizer import (
    EOS_TOKEN,
    ScriptedTokenizer,
    get_tokenizer,
)

__all__ = [
    "EOS_TOKEN",
    "ChatMessage",
    "ChatTemplate",
    "Conversation",
    "DuplicateRuleError",
    "Flavor",
    "Policy",
    "PromptTurn",
    "ProtocolError",
    "Reply",
    "Rule",
    "RuleContext",
    "RuleRegistry",
    "SGLangVersion",
    "ScriptedLLMConfig",
    "ScriptedLLMError",
    "ScriptedTokenizer",
    "UnknownRuleError",
    "VllmVersion",
    "create_app",
    "default_rules",
    "export_tokenizer",
    "get_chat_template",
    "get_tokenizer",
    "parse_chatml",
]
