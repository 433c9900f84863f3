"""The `gemini_cli` rule: answers Gemini CLI the way its tools expect, on the bundled SWE tasks.

Gemini CLI (npm `@google/gemini-cli`) sends the task as its prompt, after a
`<session_context>` block, and offers its own tools, among them `run_shell_command`,
`read_file` and `replace` (exact text, replaced once). It stops when a reply calls no tool.
This rule plays a short, methodical session on the bundled repositories: locate, read,
reproduce, edit with `replace` (the reference fix, or with probability `wrong_rate` a
plausible wrong one, from `swe/data/scripts.json`), check, and a closing summary in text.
When the CLI's router (model `auto`) asks for the prompt's complexity first, it gets the JSON
object it asks for.

Registered as `gemini_cli` by `default_rules()`; not in the default chain, so ask for it:
`agentroll scripted-llm --policy gemini_cli`.
"""

import json

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step, task_text
from agentroll.testing.scripted_llm.rules.swe import PYTEST, find_swe_task

TOOLS = {"run_shell_command", "read_file", "replace"}
ROUTER = "Task Routing AI"
"""How the router's system prompt introduces it (it asks for a complexity score)."""
DONE = "Fixed: the reproduction now gives the expected result and the test suite passes."


def _shell(command: str, description: str) -> Reply:
    return call("run_shell_command", {"command": command, "description": description})


def _router(conv: Conversation) -> Reply | None:
    """The router's scoring call: its own system prompt, the task, no tools."""
    users = "\n".join(m.content for m in conv.of_role("user"))
    if find_swe_task(users) is None:
        return None
    score = {"complexity_reasoning": "A local bug fix in one module.", "complexity_score": 30}
    return Reply(json.dumps(score))


def gemini_cli_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    first = conv.messages[0] if conv.messages else None
    if first is not None and first.role == "system" and ROUTER in first.content:
        return _router(conv)
    if not offered_tools(conv) >= TOOLS:
        return None
    task = find_swe_task(task_text(conv))
    if task is None:
        return None
    script = task.script
    path = script["edit"]["path"]
    n = step(conv)
    if n == 0:
        return _shell(script["grep"], "Find the code in question.")
    if n == 1:
        return call("read_file", {"file_path": path}, "Reading the implementation.")
    if n == 2:
        return _shell(script["repro"], "Reproduce the issue.")
    if n == 3:
        wrong = ctx.rng.random() < ctx.wrong_rate
        edit = script["wrong_edit"] if wrong else script["edit"]
        args = {
            "file_path": edit["path"],
            "instruction": "Fix the bug the issue describes.",
            "old_string": edit["old"],
            "new_string": edit["new"],
        }
        return call("replace", args, "I see the bug; fixing it.")
    if n == 4:
        return _shell(f"{script['repro']} && {PYTEST}", "Check the fix and the test suite.")
    return Reply(DONE)
