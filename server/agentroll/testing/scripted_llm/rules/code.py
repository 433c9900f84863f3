"""The `code` rule: solves the bundled `code` tasks with tools, wrong on purpose some of the time.

Write `solution.py` (the reference solution, or with probability `wrong_rate` a plausible
wrong one), try it on the prompt's example with bash, submit. Tasks come from
`agentroll.handlers.builtin.code` package data; the hidden tests are never used.
"""

from agentroll.handlers.builtin.code import CodeTask, load_code_tasks
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import (
    call,
    offered_tools,
    step,
    task_text,
    write_file,
)


def find_code_task(text: str) -> CodeTask | None:
    return next((t for t in load_code_tasks() if t.prompt in text), None)


def code_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    tools = offered_tools(conv)
    task = find_code_task(task_text(conv)) if "submit" in tools else None
    if task is None:
        return None
    n = step(conv)
    if n == 0:
        wrong = ctx.rng.random() < ctx.wrong_rate
        source = task.wrong_solution if wrong else task.solution
        return write_file(tools, "solution.py", source, "I will write the solution first.")
    if n == 1 and "bash" in tools:
        return call("bash", {"command": task.try_cmd}, "Let me try it on the example.")
    return call("submit", {}, "The output matches the example, so I am done.")
