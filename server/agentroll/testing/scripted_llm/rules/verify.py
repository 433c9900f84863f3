"""The `verify` rule: the verifier of the `solve_verify` handler, wrong on purpose some of the time.

It answers a prompt that shows a bundled math question and a proposed answer, and judges the
answer against the task's reference (a plain comparison: the scripted solver writes answers in
the reference's own form); with probability `wrong_rate / 2` its verdict is the opposite.
"""

from agentroll.handlers.builtin.solve_verify.handler import PROPOSED
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.math import find_math_task


def verify_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    user = conv.last("user")
    if user is None or PROPOSED not in user.content:
        return None
    task = find_math_task(user.content)
    if task is None:
        return Reply("I cannot tell which question this is.\nVERDICT: incorrect")
    proposed = user.content.split(PROPOSED, 1)[1].split("\n", 1)[0].strip()
    right = proposed == task.answer
    if ctx.rng.random() < ctx.wrong_rate / 2:
        right = not right
    reason = "It matches my own working." if right else "My own working gives something else."
    return Reply(
        f"I worked through the question again. {reason}\nVERDICT: "
        + ("correct" if right else "incorrect")
    )
