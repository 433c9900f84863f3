"""The `opencode` and `qwen_code` rules: drive those CLIs through the bundled SWE tasks with
their own tools.

Both CLIs state the task as the issue text and offer a shell, a file reader and an exact-text
editor, under their own names and argument names (OpenCode: `bash`, `read`, `edit` with
`filePath`/`oldString`/`newString`; Qwen Code: `run_shell_command`, `read_file`, `edit` with
`file_path`/`old_string`/`new_string`). A session: locate the code (grep), read the file,
reproduce the bug, edit it (the reference fix, or with probability `wrong_rate` a plausible
wrong one, from `swe/data/scripts.json`), rerun the reproduction and the test suite, then say
it is done in plain text, which ends the CLI's loop. Any other call of theirs (OpenCode's
session title offers no tools) is not these rules' business.

Registered as `opencode` and `qwen_code` by `default_rules()`; not in the default chain.
"""

from dataclasses import dataclass

from agentroll.handlers.builtin.swe import SweInstance
from agentroll.testing.scripted_llm.policy import Conversation, Reply, Rule, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step, task_text
from agentroll.testing.scripted_llm.rules.swe import PYTEST, find_swe_task

DONE = "The issue is fixed: the reproduction now prints the expected result and the tests pass."


@dataclass(frozen=True)
class CliTools:
    """One CLI's names for the tools a session uses."""

    shell: str
    read: str
    edit: str
    path: str
    old: str
    new: str


OPENCODE = CliTools("bash", "read", "edit", "filePath", "oldString", "newString")
QWEN_CODE = CliTools(
    "run_shell_command", "read_file", "edit", "file_path", "old_string", "new_string"
)


def cli_rule(tools: CliTools) -> Rule:
    def rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
        if not {tools.shell, tools.read, tools.edit} <= offered_tools(conv):
            return None
        task = find_swe_task(task_text(conv))
        if task is None:
            return None
        script = task.script
        workdir = SweInstance.model_validate(task.instance).workdir
        n = step(conv)
        if n == 0:
            return call(tools.shell, {"command": script["grep"]}, "Let me find the code.")
        if n == 1:
            path = f"{workdir}/{script['edit']['path']}"
            return call(tools.read, {tools.path: path}, "Reading the implementation.")
        if n == 2:
            return call(tools.shell, {"command": script["repro"]}, "Reproducing the issue.")
        if n == 3:
            edit = script["wrong_edit"] if ctx.rng.random() < ctx.wrong_rate else script["edit"]
            arguments = {
                tools.path: f"{workdir}/{edit['path']}",
                tools.old: edit["old"],
                tools.new: edit["new"],
            }
            return call(tools.edit, arguments, "I see the bug; fixing it.")
        if n == 4:
            check = f"{script['repro']} && {PYTEST}"
            return call(tools.shell, {"command": check}, "Checking the fix and the test suite.")
        return Reply(DONE)

    return rule


opencode_rule = cli_rule(OPENCODE)
qwen_code_rule = cli_rule(QWEN_CODE)
