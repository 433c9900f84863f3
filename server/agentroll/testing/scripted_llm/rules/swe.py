"""The `swe` rule: fixes the bundled repositories like a methodical engineer would.

Locate the code (grep), read it, reproduce the bug, [explore more], edit with
`str_replace_editor` (the reference fix, or with probability `wrong_rate` a plausible wrong
one), rerun the reproduction and the test suite, submit. The fix comes from the bundled
task data (`swe/data/scripts.json`), which the agent under training never sees.

`make_swe_rule(explore_turns=N)` adds N exploration turns (viewing files, git log, tests)
before the edit, for long trajectories: a rollout then takes N + 6 turns.
"""

from agentroll.handlers.builtin.swe import SweTask, load_swe_tasks
from agentroll.testing.scripted_llm.policy import Conversation, Reply, Rule, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step, task_text

# The repository's own tests (the venv's pytest-asyncio plugin would only add warnings).
PYTEST = "python -m pytest -q -p no:cacheprovider -p no:asyncio"
EXTRA_COMMANDS = ("git log --oneline -n 5", "ls -la", PYTEST)


def find_swe_task(text: str) -> SweTask | None:
    return next((t for t in load_swe_tasks() if t.instance["problem_statement"] in text), None)


def _explore(task: SweTask, k: int) -> Reply:
    files = task.script["explore"]
    if k % 2 == 0:
        path = files[(k // 2) % len(files)]
        return call("str_replace_editor", {"command": "view", "path": path}, f"Reading {path}.")
    command = EXTRA_COMMANDS[(k // 2) % len(EXTRA_COMMANDS)]
    return call("bash", {"command": command}, "Looking around a bit more.")


def make_swe_rule(explore_turns: int = 0) -> Rule:
    def swe_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
        tools = offered_tools(conv)
        task = find_swe_task(task_text(conv)) if {"bash", "submit"} <= tools else None
        if task is None:
            return None
        script = task.script
        n = step(conv)
        if n == 0:
            return call("bash", {"command": script["grep"]}, "Let me find the code in question.")
        if n == 1:
            path = script["edit"]["path"]
            return call("str_replace_editor", {"command": "view", "path": path}, "Reading it.")
        if n == 2:
            return call("bash", {"command": script["repro"]}, "Reproducing the issue first.")
        if n < 3 + explore_turns:
            return _explore(task, n - 3)
        if n == 3 + explore_turns:
            wrong = ctx.rng.random() < ctx.wrong_rate
            edit = script["wrong_edit"] if wrong else script["edit"]
            args = {
                "command": "str_replace",
                "path": edit["path"],
                "old_str": edit["old"],
                "new_str": edit["new"],
            }
            return call("str_replace_editor", args, "I see the bug; fixing it.")
        if n == 4 + explore_turns:
            command = f"{script['repro']} && {PYTEST}"
            return call("bash", {"command": command}, "Checking the fix and the test suite.")
        return call("submit", {}, "The issue is resolved.")

    return swe_rule


swe_rule = make_swe_rule()
