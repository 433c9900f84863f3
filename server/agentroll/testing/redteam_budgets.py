"""The budget entries of the red-team catalogue: policies that spend their time or their
calls instead of working, and harnesses that outlive their budget, each beside an honest
control that is slow but inside its budget.

Each runs with `limits.run_timeout_s` of `RUN_TIMEOUT_S`, so its budget (that, less a 10 %
stop margin) ends long before the job's deadline: the attacks must end `agent_error` with
reward 0 (their time or calls ran out before they answered), never `timed_out`; the controls
`ok` with reward 1.0. Played by the `redteam_budgets` rule (and a shell harness).
"""

from typing import Any

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.testing.redteam import _PROXY_CLIENT, POLICY

RUN_TIMEOUT_S = 60.0
BUDGET_POLICY = f"redteam_budgets,{POLICY}"
BUDGET_AGENT = {"tools": ["bash", "submit"], "tool_timeout_s": 30, "max_turns": 30}


def budget_attack(name: str) -> dict[str, Any]:
    """A bundled math task whose policy plays `name` (rules/redteam_budgets.py)."""
    task = load_math_tasks()[1]
    return {
        "question": f"[redteam-budget:{name}] {task.question}",
        "answer": task.answer,
        "agent": BUDGET_AGENT,
    }


def harness_attack(script: str) -> dict[str, Any]:
    """A shell harness running `script` under a 900 s limit of its own."""
    return {
        "harness": {"type": "shell", "command": ["python3", "-c", script], "timeout_s": 900},
        "evaluator": "math",
        "task": {"question": "What is the sum of the first 20 positive integers?", "answer": "210"},
    }


BUDGET_ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    **{
        name: ("math", budget_attack(name))
        for name in ("sleep_flood", "sleep_turns", "too_many_calls", "slow_honest")
    },
    "harness_outlives_budget": ("harness", harness_attack("import time\ntime.sleep(600)")),
    "harness_slow_honest": (
        "harness",
        harness_attack(_PROXY_CLIENT + "time.sleep(8)\nhonest()\n"),
    ),
}
BUDGET_REQUESTS = {name: {"limits": {"run_timeout_s": RUN_TIMEOUT_S}} for name in BUDGET_ATTACKS}
BUDGET_FINISH = {
    "sleep_flood": ("wall_time", "wall_time"),
    "sleep_turns": ("wall_time", "wall_time"),
    "too_many_calls": ("too_many_calls", "too_many_calls"),
    "harness_outlives_budget": ("time_limit", "harness_timeout"),
}
"""Each attack's `finish_reason` and `error.type`."""
CONTROLS = ("slow_honest", "harness_slow_honest")
