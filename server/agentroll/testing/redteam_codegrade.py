"""Red-team entries for the `code` grader's verdicts: results that lie about themselves, and
solutions saved under the name of a module the test runner imports. Each attack has an
honest control beside it: the same task, the same file name, the reference solution (1.0).

Played by the `redteam_codegrade` scripted rule; registered in `agentroll.testing.redteam`.
"""

from typing import Any

from agentroll.handlers.builtin.code import load_code_tasks

PALINDROME, FIZZBUZZ, ROMAN, WORD_COUNT = 0, 1, 2, 3
SHADOW_TIMEOUT_S = 3.0
"""A shadowing solution blocks on its stdin once it runs in its own process: each test then
times out, so a short per-test limit keeps the batch short."""


def code_task(index: int, play: str, solution_file: str | None = None) -> dict[str, Any]:
    """Bundled code task `index`, whose policy plays `play` (see the rule)."""
    task = load_code_tasks()[index].instance()
    task["prompt"] = f"[redteam-codegrade:{play}] {task['prompt']}"
    if solution_file is not None:
        task.update(solution_file=solution_file, test_timeout_s=SHADOW_TIMEOUT_S)
    return task


LIARS = {
    "lying_int": ROMAN,
    "lying_str": ROMAN,
    "lying_list": FIZZBUZZ,
    "lying_dict": WORD_COUNT,
}
TASKS = {ROMAN: "roman", FIZZBUZZ: "fizzbuzz", WORD_COUNT: "word_count"}
SHADOWED_MODULES = ("json", "subprocess")
ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    **{f"code_{name}": ("code", code_task(index, name)) for name, index in LIARS.items()},
    **{
        f"code_honest_{name}": ("code", code_task(index, "honest")) for index, name in TASKS.items()
    },
    **{
        f"code_shadow_{module}": ("code", code_task(PALINDROME, "shadow", f"{module}.py"))
        for module in SHADOWED_MODULES
    },
    **{
        f"code_honest_{module}_py": ("code", code_task(PALINDROME, "honest", f"{module}.py"))
        for module in SHADOWED_MODULES
    },
}
GAMING = tuple(name for name in ATTACKS if "_honest_" not in name)
"""The attacks proper (an honest grader gives them 0); the rest are their controls (1.0)."""
