"""The `mini_swe` rule: answers mini-swe-agent the way it expects, on the bundled SWE tasks.

mini-swe-agent (PyPI `mini-swe-agent`) states the task as "Please solve this issue: ..." and
either offers one `bash` tool (its default `mini.yaml`: the reply carries a tool call) or none
(`mini_textbased.yaml`: the reply carries one fenced `mswea_bash_command` block). It finishes
when a command prints `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` first. This rule plays a short,
methodical session on the bundled repositories: locate, read, reproduce, edit (the reference
fix, or with probability `wrong_rate` a plausible wrong one, from `swe/data/scripts.json`),
check, submit. Everything is a bash command, since mini-swe-agent has no editor tool.

Registered as `mini_swe` by `default_rules()`; not in the default chain (it answers every
SWE prompt the mini-swe-agent way), so ask for it: `agentroll scripted-llm --policy mini_swe`.
"""

import json
import shlex
from typing import Any

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step
from agentroll.testing.scripted_llm.rules.swe import find_swe_task

TASK_MARKER = "Please solve this issue:"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TEXT_BLOCK = "mswea_bash_command"


def edit_command(edit: dict[str, Any]) -> str:
    """A bash command that replaces `old` with `new` once in `path` (fails if not found)."""
    program = (
        "import pathlib\n"
        f"p = pathlib.Path({json.dumps(edit['path'])})\n"
        "s = p.read_text()\n"
        f"old, new = {json.dumps(edit['old'])}, {json.dumps(edit['new'])}\n"
        "assert s.count(old) == 1, 'the text to replace is not in the file exactly once'\n"
        "p.write_text(s.replace(old, new))\n"
        "print('edited', p)\n"
    )
    return f"python3 -c {shlex.quote(program)}"


def _action(command: str, thought: str, as_tool: bool) -> Reply:
    if as_tool:
        return call("bash", {"command": command}, thought)
    return Reply(f"THOUGHT: {thought}\n\n```{TEXT_BLOCK}\n{command}\n```")


def mini_swe_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    first = next((m for m in conv.messages if m.role == "user"), None)
    if first is None or TASK_MARKER not in first.content:
        return None
    task = find_swe_task(first.content)
    tools = offered_tools(conv)
    system = conv.messages[0].content if conv.messages else ""
    as_tool = tools == {"bash"}
    if task is None or not (as_tool or TEXT_BLOCK in system):
        return None
    script = task.script
    path = script["edit"]["path"]
    n = step(conv)
    if n == 0:
        return _action(script["grep"], "Let me find the code in question.", as_tool)
    if n == 1:
        return _action(f"nl -ba {shlex.quote(path)}", "Reading the implementation.", as_tool)
    if n == 2:
        return _action(script["repro"], "Reproducing the issue first.", as_tool)
    if n == 3:
        wrong = ctx.rng.random() < ctx.wrong_rate
        edit = script["wrong_edit"] if wrong else script["edit"]
        return _action(edit_command(edit), "I see the bug; fixing it.", as_tool)
    if n == 4:
        check = f"{script['repro']} && python -m pytest -q -p no:cacheprovider"
        return _action(check, "Checking the fix and the test suite.", as_tool)
    return _action(SUBMIT, "The issue is resolved; submitting.", as_tool)
