"""The `calculator` rule: sums with the `calculator_add` tool of the verifiers tools fixture.

When `calculator_add` is offered and the task asks `what is A plus B?`, it calls the tool
with both numbers, then answers with what the tool answered: the sum, or `I could not add
them.` where the tool answered an error.
"""

import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

TOOL = "calculator_add"
QUESTION = re.compile(r"what is (-?\d+) plus (-?\d+)\?")


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
