"""The `math` rule: answers the bundled math tasks, wrong on purpose some of the time.

Tasks live in `agentroll.handlers.builtin.math` package data (`data/math_tasks.jsonl`), the same
file the math handler serves to trainers, so the scripted model "knows" exactly those, and
every generated arithmetic question (`builtin.arithmetic`), which it solves by parsing.
When the prompt offers tools (the handler's tool path), it first runs the task's reference
Python in the `python` tool, then calls `submit(answer=...)`.
"""

import re
from decimal import Decimal

from agentroll.handlers.builtin.math import MathTask, load_math_tasks
from agentroll.handlers.builtin.math.arithmetic import parse_arithmetic
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step, task_text

UNSURE_REPLY = "I am not sure. \\boxed{0}"


def wrong_answer(answer: str) -> str:
    """A plausible but different answer of the same form."""
    if re.fullmatch(r"-?\d+", answer):
        return str(int(answer) + 1)
    if re.fullmatch(r"-?\d+\.\d+", answer):
        return str(Decimal(answer) + 1)
    frac = re.fullmatch(r"\\frac\{(-?\d+)\}\{(\d+)\}", answer)
    if frac:
        return f"\\frac{{{frac.group(1)}}}{{{int(frac.group(2)) + 1}}}"
    return f"{answer}+1"


def find_math_task(text: str) -> MathTask | None:
    matches = [t for t in load_math_tasks() if t.question in text]
    if matches:
        return max(matches, key=lambda t: len(t.question))
    return parse_arithmetic(text)


def _with_tools(conv: Conversation, ctx: RuleContext, tools: set[str]) -> Reply | None:
    task = find_math_task(task_text(conv))
    if task is None:
        return None
    if step(conv) == 0 and "python" in tools and task.python:
        return call("python", {"code": task.python}, "Let me compute this.")
    answer = task.answer
    if ctx.rng.random() < ctx.wrong_rate:
        answer = wrong_answer(answer)
    return call("submit", {"answer": answer}, f"The answer is {answer}.")


def math_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """Worked solution for the task asked in the last user message; a bare `\\boxed{}`
    for a follow-up that asks for the final answer; `I am not sure` otherwise."""
    tools = offered_tools(conv)
    if "submit" in tools:
        return _with_tools(conv, ctx, tools)
    users = conv.of_role("user")
    if not users:
        return None
    last = users[-1].content
    task = find_math_task(last)
    follow_up = task is None and "\\boxed" in last
    if task is None:
        task = next((t for m in reversed(users[:-1]) if (t := find_math_task(m.content))), None)
    if task is None:
        return Reply(UNSURE_REPLY)
    answer = task.answer
    if ctx.rng.random() < ctx.wrong_rate:
        answer = wrong_answer(answer)
    if follow_up:
        return Reply(f"\\boxed{{{answer}}}")
    boxed = f"\\boxed{{{task.answer}}}"
    if boxed not in task.solution:
        return Reply(f"{task.solution}\nThe answer is \\boxed{{{answer}}}")
    head, _, tail = task.solution.rpartition(boxed)
    return Reply(f"{head}\\boxed{{{answer}}}{tail}")
