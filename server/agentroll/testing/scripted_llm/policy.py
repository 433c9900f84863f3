"""Scripted policies: rules that map a conversation to the assistant's reply text.

A rule is any callable `(Conversation, RuleContext) -> Reply | None`; `None` means "not
mine". A policy is a chain of rule names tried in order, always ending with `default`.
New rules (e.g. agents that emit tool calls) are added with `RuleRegistry.register`, or
named in the config as a `module:attribute` path. The built-in task rules live in `rules/`.
"""

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from agentroll.handlers.plugins import PluginRegistry
from agentroll.testing.scripted_llm.errors import DuplicateRuleError, UnknownRuleError
from agentroll.testing.scripted_llm.template import PromptTurn


@dataclass(frozen=True, slots=True)
class Conversation:
    """The prompt, read back into ChatML messages."""

    messages: tuple[PromptTurn, ...]
    prompt_text: str

    def last(self, role: str) -> PromptTurn | None:
        for message in reversed(self.messages):
            if message.role == role:
                return message
        return None

    def of_role(self, role: str) -> list[PromptTurn]:
        return [m for m in self.messages if m.role == role]


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    ends_turn: bool = True
    """True: the model closes its turn, so the EOS id follows the text."""


@dataclass(frozen=True, slots=True)
class RuleContext:
    """Per-choice randomness (seeded from request seed + prompt) and the server knobs."""

    rng: random.Random
    wrong_rate: float


Rule = Callable[[Conversation, RuleContext], Reply | None]

REPEAT_PREFIX = "Repeat after me:"
DEFAULT_REPLY = "I am a scripted test model, and I have nothing more to add."


def echo_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """`Repeat after me: X` -> `X`."""
    user = conv.last("user")
    if user is None or REPEAT_PREFIX not in user.content:
        return None
    return Reply(user.content.split(REPEAT_PREFIX, 1)[1].strip())


def default_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    return Reply(DEFAULT_REPLY)


def _as_rule(obj: object, origin: str) -> Rule:
    if not callable(obj):
        raise UnknownRuleError(f"{origin} is not a rule (a callable): {obj!r}")
    return cast(Rule, obj)


def _unknown(name: str, known: list[str]) -> UnknownRuleError:
    return UnknownRuleError(f"unknown rule {name!r}; known rules: {', '.join(known)}")


# The rules every scripted backend knows; each module is imported on first use.
BUILTIN_RULES = {
    "default": f"{__name__}:default_rule",
    "echo": f"{__name__}:echo_rule",
    "math": "agentroll.testing.scripted_llm.rules.math:math_rule",
    "code": "agentroll.testing.scripted_llm.rules.code:code_rule",
    "swe": "agentroll.testing.scripted_llm.rules.swe:swe_rule",
    "stem": "agentroll.testing.scripted_llm.rules.stem:stem_rule",
    "mini_swe": "agentroll.testing.scripted_llm.rules.mini_swe:mini_swe_rule",
    "claude_code": "agentroll.testing.scripted_llm.rules.claude_code:claude_code_rule",
    "codex": "agentroll.testing.scripted_llm.rules.codex:codex_rule",
    "gemini_cli": "agentroll.testing.scripted_llm.rules.gemini_cli:gemini_cli_rule",
    "opencode": "agentroll.testing.scripted_llm.rules.chat_clis:opencode_rule",
    "qwen_code": "agentroll.testing.scripted_llm.rules.chat_clis:qwen_code_rule",
    "redteam": "agentroll.testing.scripted_llm.rules.redteam:redteam_rule",
    "redteam_budgets": "agentroll.testing.scripted_llm.rules.redteam_budgets:redteam_budgets_rule",
    "redteam_codegrade": "agentroll.testing.scripted_llm.rules.redteam_codegrade:codegrade_rule",
    "verify": "agentroll.testing.scripted_llm.rules.verify:verify_rule",
    "judge": "agentroll.testing.scripted_llm.rules.judge:judge_rule",
    "judge_garbage": "agentroll.testing.scripted_llm.rules.judge:judge_garbage_rule",
    "compaction": "agentroll.testing.scripted_llm.rules.compaction:compaction_rule",
    "openenv_guess": "agentroll.testing.scripted_llm.rules.openenv:openenv_guess_rule",
    "openenv_mcp_guess": "agentroll.testing.scripted_llm.rules.openenv_mcp:openenv_mcp_guess_rule",
    "calculator": "agentroll.testing.scripted_llm.rules.verifiers_env:calculator_rule",
    "guess": "agentroll.testing.scripted_llm.rules.verifiers_env:guess_rule",
    "notes": "agentroll.testing.scripted_llm.rules.verifiers_notes:notes_rule",
    "openreward_guess": "agentroll.testing.scripted_llm.rules.openreward:openreward_guess_rule",
}


class RuleRegistry:
    """Named rules, looked up the way every agentroll plugin is (built-in table, then a
    `module:attribute` path). A name claimed twice is an error; an unknown name lists the
    known ones."""

    def __init__(self, builtins: Mapping[str, str] | None = None) -> None:
        self._rules = PluginRegistry[Rule](
            "rule",
            convert=_as_rule,
            unknown=_unknown,
            duplicate=DuplicateRuleError,
            builtins=builtins,
            load_error=UnknownRuleError,
        )

    def register(self, name: str, rule: Rule, *, replace: bool = False) -> None:
        self._rules.register(name, rule, replace=replace)

    def names(self) -> list[str]:
        return self._rules.names()

    def get(self, name: str) -> Rule:
        return self._rules.get(name)

    def chain(self, names: Iterable[str]) -> "Policy":
        rules = [self.get(n) for n in names if n != "default"]
        return Policy([*rules, self.get("default")])


class Policy:
    """A resolved chain of rules; the last one always answers."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules

    def reply(self, conv: Conversation, ctx: RuleContext) -> Reply:
        for rule in self.rules:
            reply = rule(conv, ctx)
            if reply is not None:
                return reply
        return Reply(DEFAULT_REPLY)


# Every built-in task family, for a scripted backend that serves mixed batches.
TASK_RULES = ("swe", "code", "stem", "math")


def default_rules() -> RuleRegistry:
    """A fresh registry holding the built-in rules: `default`, `echo`, one per bundled task
    family: `math`, `code`, `swe`, `stem` (tool-using where the prompt offers tools),
    `mini_swe` (the mini-swe-agent harness), `redteam` and `redteam_budgets` (the attack
    catalogue), `verify`, the verifier agent of `solve_verify` (put it before `math` in a
    chain), `judge` / `judge_garbage`, judge models for `llm_judge` (a backend of their
    own), one per coding-agent CLI preset: `claude_code`, `codex`, `gemini_cli`,
    `opencode`, `qwen_code`, and `compaction` (the title and summary calls of the
    scripted harness that compacts its context, `rules.compaction`)."""
    return RuleRegistry(BUILTIN_RULES)
