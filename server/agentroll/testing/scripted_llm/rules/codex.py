"""The `codex` rule: answers Codex CLI the way it expects, on the bundled SWE tasks.

Codex (`codex exec`, the `codex` harness preset) offers its shell as `exec_command` (`cmd`:
a command line) and states the task in a user message after its environment context. It
edits files with `apply_patch`: its own freeform tool where Codex offers one (for models it
knows), else the `apply_patch` command in the shell, which Codex intercepts and applies
itself. It ends when a reply has no tool call. This rule plays a short, methodical session:
locate, read, reproduce, patch (the reference fix, or with probability `wrong_rate` a
plausible wrong one, from `swe/data/scripts.json`), check, answer.

Registered as `codex` by `default_rules()`; not in the default chain, so ask for it:
`agentroll scripted-llm --policy codex`.
"""

import shlex
from typing import Any

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step
from agentroll.testing.scripted_llm.rules.swe import PYTEST, find_swe_task

SHELL = "exec_command"
PATCH_TOOL = "apply_patch"
DONE = "Fixed: the reproduction now behaves as the issue asks and the test suite passes."


def patch_text(edit: dict[str, Any]) -> str:
    """The edit as an apply_patch patch: the old lines replaced by the new ones."""
    old, new = edit["old"], edit["new"]
    if not (old.endswith("\n") and new.endswith("\n")):
        raise ValueError(f"an apply_patch edit replaces whole lines: {edit['path']}")
    removed = "".join(f"-{line}\n" for line in old.splitlines())
    added = "".join(f"+{line}\n" for line in new.splitlines())
    return f"*** Begin Patch\n*** Update File: {edit['path']}\n@@\n{removed}{added}*** End Patch\n"


def _shell(command: str, thought: str) -> Reply:
    return call(SHELL, {"cmd": command}, thought)


def _patch(patch: str, tools: set[str], thought: str) -> Reply:
    if PATCH_TOOL in tools:
        return call(PATCH_TOOL, {"input": patch}, thought)
    return _shell(f"{PATCH_TOOL} <<'EOF'\n{patch}EOF", thought)


def codex_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    tools = offered_tools(conv)
    if SHELL not in tools:
        return None
    # Codex's first user message is its environment context; the task comes after it.
    task = find_swe_task("\n".join(m.content for m in conv.of_role("user")))
    if task is None:
        return None
    script = task.script
    path = script["edit"]["path"]
    n = step(conv)
    if n == 0:
        return _shell(script["grep"], "Let me find the code in question.")
    if n == 1:
        return _shell(f"nl -ba {shlex.quote(path)}", "Reading the implementation.")
    if n == 2:
        return _shell(script["repro"], "Reproducing the issue first.")
    if n == 3:
        wrong = ctx.rng.random() < ctx.wrong_rate
        edit = script["wrong_edit"] if wrong else script["edit"]
        return _patch(patch_text(edit), tools, "I see the bug; patching it.")
    if n == 4:
        return _shell(f"{script['repro']} && {PYTEST}", "Checking the fix and the test suite.")
    return Reply(DONE)
