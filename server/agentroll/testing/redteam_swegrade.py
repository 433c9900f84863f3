"""The `swe` grader's isolation attacks for the red-team batch (`agentroll.testing.redteam`).

Each is a bundled SWE task whose policy plays one attack of `rules.redteam_swegrade`: modules
that shadow the interpreter's own, a full `/tmp` or workspace, a hunt for later history.
"""

from typing import Any

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.testing.scripted_llm.rules.redteam_swegrade import ATTACKS, HISTORY_SETUP


def swegrade_attack(name: str) -> dict[str, Any]:
    task = dict(load_swe_tasks()[0].instance)
    task["problem_statement"] = f"[redteam-swegrade:{name}] {task['problem_statement']}"
    if name == "history_probe":  # a repository that comes with later history
        task["setup_cmd"] = HISTORY_SETUP
    return task


SWEGRADE_ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    f"swe_{name}": ("swe", swegrade_attack(name)) for name in ATTACKS
}
SWEGRADE_GAMING = ("swe_shadow_json", "swe_shadow_pluggy")
"""The attacks that earn nothing; the others make the reference fix and earn 1.0."""
