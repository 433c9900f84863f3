"""The `claude_code` rule: drives Claude Code through the bundled SWE tasks with its own tools.

Claude Code states the task as its first user turn (after its own `<system-reminder>` blocks),
tells the model its working directory in a system message ("Primary working directory: ..."),
and offers `Bash`, `Read`, `Edit`, `Write` and more. Its file tools take absolute paths, and
`Edit` refuses a file that was not `Read` first. This rule plays a short, methodical session:
locate (Bash), read (Read), reproduce (Bash), edit (Edit: the reference fix, or with
probability `wrong_rate` a plausible wrong one, from `swe/data/scripts.json`), check (Bash),
then answer in text without a tool call, which ends Claude Code's print mode.

Registered as `claude_code` by `default_rules()`; not in the default chain, so ask for it:
`agentroll scripted-llm --policy claude_code`.
"""

import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step, task_text
from agentroll.testing.scripted_llm.rules.swe import PYTEST, find_swe_task

TOOLS = {"Bash", "Read", "Edit"}
_WORKDIR = re.compile(r"Primary working directory: (\S+)")
DONE = "The issue is fixed: the reproduction now behaves as the issue asks and the tests pass."


def _workdir(conv: Conversation) -> str | None:
    """The working directory Claude Code's system message names."""
    for message in conv.messages:
        found = _WORKDIR.search(message.content) if message.role == "system" else None
        if found:
            return found.group(1).rstrip("/")
    return None


def claude_code_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    task = find_swe_task(task_text(conv)) if offered_tools(conv) >= TOOLS else None
    workdir = _workdir(conv)
    if task is None or workdir is None:
        return None
    script = task.script
    path = f"{workdir}/{script['edit']['path']}"
    n = step(conv)
    if n == 0:
        args = {"command": script["grep"], "description": "Find the code the issue is about"}
        return call("Bash", args, "Let me find the code in question.")
    if n == 1:
        return call("Read", {"file_path": path}, "Reading the implementation.")
    if n == 2:
        args = {"command": script["repro"], "description": "Reproduce the issue"}
        return call("Bash", args, "Reproducing the issue first.")
    if n == 3:
        edit = script["wrong_edit"] if ctx.rng.random() < ctx.wrong_rate else script["edit"]
        # Keys in the model's own order: Claude Code sends them back reordered, with
        # `replace_all` filled in, and the proxy must still see the same turn.
        args = {"new_string": edit["new"], "old_string": edit["old"], "file_path": path}
        return call("Edit", args, "I see the bug; fixing it.")
    if n == 4:
        check = f"{script['repro']} && {PYTEST}"
        return call("Bash", {"command": check, "description": "Check the fix"}, "Checking.")
    return Reply(DONE)
