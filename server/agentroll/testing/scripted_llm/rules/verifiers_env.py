"""Rules that play the verifiers fixtures (`tests/fixtures/verifiers_env_pkg`).

- `calculator`: when `calculator_add` is offered and the task asks `what is A plus B?`, it
  calls the tool with both numbers, then answers with what the tool answered: the sum, or
  `I could not add them.` where the tool answered an error.
- `guess`: the guessing game of `agentroll_vf_guess` (its environment answers `higher` or
  `lower` after each guess): a binary search over 1 to 10, each guess the number alone. A
  task that says `Say BOOM first.` is answered `BOOM` first.
"""

import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

TOOL = "calculator_add"
QUESTION = re.compile(r"what is (-?\d+) plus (-?\d+)\?")
GAME = "Guess my number from 1 to 10."
BOOM = "Say BOOM first."


def calculator_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    question = QUESTION.search(task_text(conv))
    if TOOL not in offered_tools(conv) or question is None:
        return None
    answer = conv.last("tool")
    if answer is None:
        a, b = (int(g) for g in question.groups())
        return call(TOOL, {"a": a, "b": b}, "Let me add them.")
    text = answer.content.strip()
    return Reply(text if text.lstrip("-").isdigit() else "I could not add them.")


def guess_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    task = task_text(conv)
    if GAME not in task:
        return None
    guesses = [m.content.strip() for m in conv.of_role("assistant") if m.complete]
    if BOOM in task and not guesses:
        return Reply("BOOM")
    low, high = 1, 10
    feedback = [m.content.strip() for m in conv.of_role("user")][1:]  # after the task
    for guess, said in zip(guesses, feedback, strict=False):
        if not guess.isdigit():
            continue
        if said == "higher":
            low = max(low, int(guess) + 1)
        elif said == "lower":
            high = min(high, int(guess) - 1)
    return Reply(str((low + high) // 2))
