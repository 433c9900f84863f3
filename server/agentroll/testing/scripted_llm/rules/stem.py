"""The `stem` rule: answers the bundled multiple-choice questions, wrong some of the time.

Without tools it explains and states its choice in one of the usual formats (`\\boxed{C}`,
"Answer: C", "(C)"), so answer extraction is exercised; with a `submit` tool it submits
the letter.
"""

from agentroll.handlers.builtin.stem import StemTask, load_stem_tasks
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

FORMATS = ("The answer is \\boxed{{{}}}.", "Answer: {}", "So the correct choice is ({}).")


def find_stem_task(text: str) -> StemTask | None:
    return next((t for t in load_stem_tasks() if t.question in text), None)


def stem_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    task = find_stem_task(task_text(conv))
    if task is None:
        return None
    letter = task.answer
    if ctx.rng.random() < ctx.wrong_rate:
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(task.choices)]
        letter = ctx.rng.choice([x for x in letters if x != task.answer])
    if "submit" in offered_tools(conv):
        return call("submit", {"answer": letter}, task.explanation)
    return Reply(f"{task.explanation}\n\n{ctx.rng.choice(FORMATS).format(letter)}")
