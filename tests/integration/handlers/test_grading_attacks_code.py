"""A policy that games the `code` grader earns nothing: a solution that exits early at import
(os._exit, sys.exit, SystemExit, an atexit hook), returns objects that lie about themselves,
kills the test runner or every process in
the grading sandbox, or leaves a process behind in its own sandbox to rewrite the hidden
tests gets its real score or 0 (never 1, never `infra_error`), through the real handler in
real bubblewrap sandboxes."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, marked, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.integration.handlers.test_code_runner_leftovers import CHAIN, FORGER

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

TASK = load_code_tasks()[0]  # is_palindrome, assert-style tests
WRONG = "def is_palindrome(text):\n    return False\n"
# Left running in the agent's sandbox: turns every hidden test it can find into `pass`.
TEST_REWRITER = """import glob, json, time
while True:
    for path in glob.glob("/tmp/*/spec.json"):
        try:
            with open(path) as fh:
                spec = json.load(fh)
            if any(t != "pass" for t in spec["tests"]):
                spec["tests"] = ["pass"] * len(spec["tests"])
                with open(path, "w") as fh:
                    json.dump(spec, fh)
        except (OSError, ValueError, KeyError):
            pass
    time.sleep(0.001)
"""
KILL_RUNNER = """import os
with open(f"/proc/{os.getppid()}/stat") as fh:
    os.kill(int(fh.read().rsplit(")", 1)[1].split()[1]), 9)
"""
ATTACKS: dict[str, list[str]] = {
    "honest": [write("solution.py", TASK.solution)],
    "wrong": [write("solution.py", WRONG)],
    "os-exit": [write("solution.py", "import os\nos._exit(0)\n")],
    "sys-exit": [write("solution.py", "import sys\nsys.exit(0)\n")],
    "system-exit": [write("solution.py", "raise SystemExit(0)\n")],
    "atexit": [write("solution.py", f"import atexit, os\natexit.register(os._exit, 0)\n{WRONG}")],
    # The runner is its parent's (the judge's) parent: /proc/PID/stat names it.
    "kill-runner": [write("solution.py", KILL_RUNNER + WRONG)],
    # A fork chain racing the runner's sweep, rewriting later verdicts as passes.
    "verdict-forger": [write("solution.py", FORGER + CHAIN.format(function=WRONG))],
    "leftover-process": [
        write("solution.py", WRONG),
        write("/tmp/rewriter.py", TEST_REWRITER),
        "setsid nohup python3 /tmp/rewriter.py >/dev/null 2>&1 < /dev/null & echo started",
    ],
    # Kills every process it can see (not the grading sandbox's own server: it is the pid
    # namespace's init, out of the solution's reach).
    "kill-all": [write("solution.py", f"import os\nos.kill(-1, 9)\n{WRONG}")],
    "no-solution": ["echo 'I will not write anything'"],
    "huge-solution": [
        f"{{ echo '{WRONG.splitlines()[0]}'; head -c 3000000 /dev/zero; }} > solution.py"
    ],
}


def code_job(attack: str) -> dict[str, Any]:
    instance = TASK.instance()
    return job(attack, "code", {**instance, "prompt": marked(instance["prompt"], attack)})


async def test_gamed_code_grading_earns_nothing(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with (
        scripted_backend(0.0, attack_rules(ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, [code_job(a) for a in ATTACKS], timeout_s=600)
    honest, wrong = results.pop("honest"), results.pop("wrong")
    assert (honest.outcome, honest.reward) == (Outcome.ok, 1.0), honest.error
    real = [r["passed"] for r in wrong.reward_info["tests"]]  # what `return False` earns
    assert wrong.reward == 0.0 and 0 < sum(real) < len(TASK.tests)
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.ok, 0.0), t.error
        assert t.reward_info["total"] == len(TASK.tests)
    for job_id in ("atexit", "leftover-process", "verdict-forger"):  # the wrong one's score
        assert [r["passed"] for r in results[job_id].reward_info["tests"]] == real, job_id
    for job_id in ("os-exit", "sys-exit", "system-exit"):
        details = [r["detail"] for r in results[job_id].reward_info["tests"] if not r["passed"]]
        assert all("exited 0 before the test finished" in d for d in details), (job_id, details)
    for job_id in ("os-exit", "sys-exit", "system-exit", "kill-runner", "kill-all"):
        assert results[job_id].reward_info["passed"] == 0, job_id
    for job_id in ("kill-runner", "kill-all"):  # the grading sandbox survived: graded once
        info = results[job_id].reward_info
        assert (info["reason"], info["grading_attempts"]) == ("grading_disrupted", 1), job_id
    assert results["no-solution"].reward_info["reason"] == "no_solution"
    assert "solution.py" in results["no-solution"].reward_info["detail"]
    assert results["huge-solution"].reward_info["reason"] == "no_solution"
    assert "bytes" in results["huge-solution"].reward_info["detail"]
