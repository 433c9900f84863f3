"""Hidden tests that no test patch carries (SWE-smith hides them in a commit, R2E-Gym in the
image) come in through `eval_setup_cmd` at EVAL: the fix scores 1 against tests the agent
never had, and a set-up command that fails on the agent's tree scores 0, not 1."""

import shlex
import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, marked, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

TASK = load_swe_tasks()[0]
SLUG = "textkit/slug.py"
_FIXED = (
    bundled_repos()[TASK.instance["repo"]]
    .files[SLUG]
    .replace(TASK.script["edit"]["old"], TASK.script["edit"]["new"])
)
ATTACKS = {"honest": [write(SLUG, _FIXED)]}
BRING_TESTS = f"printf '%s' {shlex.quote(TASK.instance['test_patch'])} | git apply -"


async def test_hidden_tests_arrive_through_eval_setup_cmd(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    statement = marked(TASK.instance["problem_statement"], "honest")
    base = {**TASK.instance, "problem_statement": statement, "test_patch": ""}
    jobs = [
        job("brought-in", "swe", {**base, "eval_setup_cmd": BRING_TESTS}),
        job("setup-fails", "swe", {**base, "eval_setup_cmd": "cp -r /no-such-tests r2e_tests"}),
    ]
    async with (
        scripted_backend(0.0, attack_rules(ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
    brought = results["brought-in"]
    assert (brought.outcome, brought.reward) == (Outcome.ok, 1.0), brought.error
    assert brought.reward_info["FAIL_TO_PASS"]["success"] == TASK.instance["FAIL_TO_PASS"]
    failed = results["setup-fails"]
    assert (failed.outcome, failed.reward) == (Outcome.ok, 0.0), failed.error
    assert failed.reward_info["reason"] == "eval_setup_failed"
    assert "no-such-tests" in failed.reward_info["detail"]
