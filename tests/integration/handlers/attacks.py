"""Scripted adversaries for the grading tests: a policy that runs a fixed list of shell
commands (the attack), then submits.

A job picks its attack by carrying `[scripted attack: NAME]` in its task text (the SWE
problem statement or the code prompt); the built-in rules still recognise the task, since
its original text stays a part of the prompt.
"""

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from agentroll.testing.scripted_llm import RuleRegistry, default_rules
from agentroll.testing.scripted_llm.policy import Conversation, Reply, Rule, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, step, task_text

_MARKER = re.compile(r"\[scripted attack: ([\w.-]+)\]")
POLICY = "attack,swe,code"


def write(path: str, text: str, *, append: bool = False) -> str:
    """A shell command that writes `text` to `path` (creating its folder)."""
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    redirect = ">>" if append else ">"
    return (
        f"mkdir -p {shlex.quote(folder)} && cat {redirect} {shlex.quote(path)} "
        f"<<'AGENTROLL_ATTACK_EOF'\n{text}AGENTROLL_ATTACK_EOF"
    )


def attack_rule(attacks: Mapping[str, Sequence[str]]) -> Rule:
    """Turn k runs the k-th command of the job's attack with bash; then it submits."""

    def rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
        found = _MARKER.search(task_text(conv))
        if found is None:
            return None
        commands = attacks[found.group(1)]
        n = step(conv)
        if n < len(commands):
            return call("bash", {"command": commands[n]}, "Making the tests pass.")
        return call("submit", {}, "Done.")

    return rule


def attack_rules(attacks: Mapping[str, Sequence[str]]) -> RuleRegistry:
    rules = default_rules()
    rules.register("attack", attack_rule(attacks))
    return rules


def marked(text: str, attack: str) -> str:
    return f"{text}\n\n[scripted attack: {attack}]"


def job(job_id: str, handler: str, instance: dict[str, Any]) -> dict[str, Any]:
    return {"job_id": job_id, "handler": handler, "instance": instance, "sampling": {"seed": 1}}
