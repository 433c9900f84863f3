"""Scripted policies: rules that map a conversation to the assistant's reply text.

A rule is any callable `(Conversation, RuleContext) -> Reply | None`; `None` means "not
mine". A policy is a chain of rule names tried in order, always ending with `default`.
New rules (e.g. agents that emit tool calls) are added with `RuleRegistry.register`, or
named in the config as a `module:attribute` path.
"""

import importlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agentroll.testing.scripted_llm.errors import DuplicateRuleError, UnknownRuleError
from agentroll.testing.scripted_llm.template import ChatMessage


@dataclass(frozen=True, slots=True)
class Conversation:
    """The prompt, read back into ChatML messages."""

    messages: tuple[ChatMessage, ...]
    prompt_text: str

    def last(self, role: str) -> ChatMessage | None:
        for message in reversed(self.messages):
            if message.role == role:
                return message
        return None

    def of_role(self, role: str) -> list[ChatMessage]:
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


class RuleRegistry:
    """Named rules. Duplicates are an error; an unknown name lists the known ones."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}

    def register(self, name: str, rule: Rule, *, replace: bool = False) -> None:
        if name in self._rules and not replace:
            raise DuplicateRuleError(f"rule {name!r} is already registered")
        self._rules[name] = rule

    def names(self) -> list[str]:
        return sorted(self._rules)

    def get(self, name: str) -> Rule:
        if name in self._rules:
            return self._rules[name]
        if ":" in name:  # "package.module:attribute"
            module, _, attr = name.partition(":")
            try:
                rule: Rule = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise UnknownRuleError(f"cannot import rule {name!r}: {exc}") from exc
            return rule
        raise UnknownRuleError(f"unknown rule {name!r}; known rules: {', '.join(self.names())}")

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
    family: `math`, `code`, `swe`, `stem` (tool-using where the prompt offers tools), and
    `verify`, the verifier agent of `solve_verify` (put it before `math` in a chain)."""
    from agentroll.testing.scripted_llm.code_rule import code_rule
    from agentroll.testing.scripted_llm.math_rule import math_rule
    from agentroll.testing.scripted_llm.mini_swe_rule import mini_swe_rule
    from agentroll.testing.scripted_llm.redteam_rule import redteam_rule
    from agentroll.testing.scripted_llm.stem_rule import stem_rule
    from agentroll.testing.scripted_llm.swe_rule import swe_rule
    from agentroll.testing.scripted_llm.verify_rule import verify_rule

    registry = RuleRegistry()
    registry.register("default", default_rule)
    registry.register("echo", echo_rule)
    registry.register("math", math_rule)
    registry.register("code", code_rule)
    registry.register("swe", swe_rule)
    registry.register("stem", stem_rule)
    registry.register("mini_swe", mini_swe_rule)
    registry.register("redteam", redteam_rule)
    registry.register("verify", verify_rule)
    return registry
