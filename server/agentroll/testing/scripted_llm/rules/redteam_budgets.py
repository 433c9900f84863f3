"""The `redteam_budgets` rule: policies that spend their time or calls instead of working.

A task marked `[redteam-budget:NAME]` gets NAME's plan, one reply per turn; once the plan is
played (or for a turn past it) the policy submits the bundled math task's right answer:

- `sleep_flood`: one reply of twelve `sleep` calls (under the calls-per-reply cap), then more;
- `sleep_turns`: one `sleep` per turn, turn after turn;
- `too_many_calls`: one reply of seventeen quick calls, one more than the cap;
- `slow_honest`: the control, slow but inside its budget: a few short sleeps over four turns
  (three in one reply), then the right answer.

The budget attacks never get to answer: their time or their reply's calls run out first.
"""

import json
import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.math import find_math_task
from agentroll.testing.scripted_llm.rules.steps import call, step, task_text

MARKER = re.compile(r"\[redteam-budget:([a-z_]+)\]")


def _calls(*commands: str) -> Reply:
    """One reply with a Hermes `bash` call per command."""
    blocks = [
        json.dumps({"name": "bash", "arguments": {"command": c}}, ensure_ascii=False)
        for c in commands
    ]
    return Reply("Working on it.\n" + "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks))


PLANS: dict[str, list[Reply]] = {
    "sleep_flood": [_calls(*["sleep 30"] * 12)] * 4,
    "sleep_turns": [_calls("sleep 30")] * 30,
    "too_many_calls": [_calls(*[f"echo {i}" for i in range(17)])],
    "slow_honest": [
        _calls("sleep 3"),
        _calls("sleep 3"),
        _calls("sleep 2", "sleep 2", "sleep 2"),
        _calls("sleep 3"),
    ],
}


def redteam_budgets_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """Play the marked task's plan (see the module docstring); None for unmarked tasks."""
    text = task_text(conv)
    found = MARKER.search(text)
    if found is None or found.group(1) not in PLANS:
        return None
    plan, n = PLANS[found.group(1)], step(conv)
    if n < len(plan):
        return plan[n]
    task = find_math_task(text)
    if task is None:
        return None
    return call("submit", {"answer": task.answer}, f"The answer is {task.answer}.")
