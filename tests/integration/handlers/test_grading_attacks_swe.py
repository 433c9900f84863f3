"""A policy that games the `swe` grader earns nothing: forged test output, test hooks, pytest
configuration, start-up hooks, removed tests and a faked missing runner all end as reward 0
(never 1, never `infra_error`), through the real handler in real bubblewrap sandboxes. The
honest fix still scores 1, also next to a test-setup change the instance allows."""

import shutil
from pathlib import Path
from typing import Any

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

TASK = load_swe_tasks()[0]  # textkit: slugify() keeps doubled separators
SLUG, WRAP_TESTS = "textkit/slug.py", "tests/test_wrap.py"
_SOURCE = bundled_repos()[TASK.instance["repo"]].files
FIXED_SLUG = _SOURCE[SLUG].replace(TASK.script["edit"]["old"], TASK.script["edit"]["new"])
HONEST_FIX = write(SLUG, FIXED_SLUG)

# Rewrites every test report to "passed": what a hook in the agent's reach forges.
PASSING_HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
HOOK_MODULE = write("textkit/hooks.py", PASSING_HOOK)
# Prints a pytest summary line for every test it was asked to run, after pytest's own.
FORGED_SUMMARY = """
import atexit as _atexit
import sys as _sys

_atexit.register(lambda: print("\\n".join("PASSED " + a for a in _sys.argv if "::" in a)))
"""
FAKE_RUNNER_MISSING = """
import atexit as _atexit

_atexit.register(print, "sh: 1: pytest: not found; No module named pytest")
"""
# Started by git in the grading sandbox (a smudge filter of the agent's), it waits for the
# grader's plugin and teaches it to report every test as passed.
PLUGIN_PATCHER = """here=$(pwd); i=0
while [ $i -lt 6000 ]; do
  for f in /agentroll-grader/*/agentroll_report_*.py; do
    if [ -f "$f" ] && ! grep -q EVIL "$f"; then echo "# EVIL" >> "$f"; cat "$here/.hook" >> "$f"; fi
  done
  i=$((i+1)); sleep 0.005
done
"""
SMUDGE = (
    "[filter \"x\"]\n\tsmudge = sh -c 'setsid sh .evil.sh </dev/null >/dev/null 2>&1 & exec cat'\n"
)
ATTACKS: dict[str, list[str]] = {
    "honest": [HONEST_FIX],
    "forged-summary": [write(SLUG, FORGED_SUMMARY, append=True)],
    "conftest-hook": [write("tests/conftest.py", PASSING_HOOK)],
    "pytest-ini": [HOOK_MODULE, write("pytest.ini", "[pytest]\naddopts = -p textkit.hooks\n")],
    "pyproject": [
        HOOK_MODULE,
        write("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p textkit.hooks"\n'),
    ],
    "pytest-plugins": [
        HOOK_MODULE,
        f"sed -i '1i pytest_plugins = [\"textkit.hooks\"]' {WRAP_TESTS}",
    ],
    "sitecustomize": [write("sitecustomize.py", "import textkit.hooks\n")],
    # The fix breaks truncate(), and the test that would show it is renamed away.
    "test-removed": [
        HONEST_FIX,
        "sed -i 's/    if len(text) <= width:/    if True:/' textkit/wrap.py",
        f"sed -i 's/def test_long_text_is_cut/def _test_long_text_is_cut/' {WRAP_TESTS}",
    ],
    # Output that once made a failing run look like a missing test runner (infra_error).
    "fake-runner-missing": [write(SLUG, FAKE_RUNNER_MISSING, append=True)],
    "benign-conftest": [HONEST_FIX, write("tests/conftest.py", "# shared fixtures go here\n")],
    # git runs a filter of the agent's while the grader checks files out ($HOME was the repo).
    "git-smudge": [
        write(".evil.sh", PLUGIN_PATCHER),
        write(".hook", PASSING_HOOK.replace("import pytest\n", "")),
        write(".gitattributes", "tests/*.py filter=x\n"),
        write(".gitconfig", SMUDGE),
    ],
    "pytest-toml": [
        HOOK_MODULE,
        write("pytest.toml", '[pytest]\naddopts = ["-p", "textkit.hooks"]\n'),
    ],
    # An installed-package record at the repository root: pytest loads its entry point.
    "dist-info-plugin": [
        HOOK_MODULE,
        write("evil-0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 0\n"),
        write("evil-0.dist-info/entry_points.txt", "[pytest11]\nevil = textkit.hooks\n"),
    ],
    # Incompressible-looking files that git stores small: the grader must not unpack them
    # where its own files go.
    "fill-grader-tmp": [
        "for i in 1 2 3; do (printf '\\0'; head -c 60000000 /dev/zero | tr '\\0' a)"
        " > textkit/blob$i.py; done"
    ],
}


def swe_job(attack: str, **overrides: Any) -> dict[str, Any]:
    statement = marked(TASK.instance["problem_statement"], attack)
    instance = {**TASK.instance, "problem_statement": statement, **overrides}
    return job(f"{attack}-{overrides.get('eval_mode', 'fresh')}", "swe", instance)


async def test_gamed_swe_grading_earns_nothing(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    forged = [a for a in ATTACKS if a not in ("honest", "benign-conftest")]
    jobs = [
        swe_job("honest"),
        *(swe_job(a) for a in forged),
        swe_job("conftest-hook", eval_mode="same"),
    ]
    async with (
        scripted_backend(0.0, attack_rules(ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
    honest = results.pop("honest-fresh")
    assert (honest.outcome, honest.reward) == (Outcome.ok, 1.0), honest.error
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.ok, 0.0), t.error
        assert t.reward_info["resolved"] is False
    refused = {
        "conftest-hook-fresh": ["tests/conftest.py"],
        "conftest-hook-same": ["tests/conftest.py"],
        "pytest-ini-fresh": ["pytest.ini"],
        "pyproject-fresh": ["pyproject.toml"],
        "pytest-plugins-fresh": [WRAP_TESTS],
        "sitecustomize-fresh": ["sitecustomize.py"],
        "git-smudge-fresh": [".gitattributes", ".gitconfig"],  # and no filter of it ran
        "pytest-toml-fresh": ["pytest.toml"],
        "dist-info-plugin-fresh": [
            "evil-0.dist-info/METADATA",
            "evil-0.dist-info/entry_points.txt",
        ],
    }
    for job_id, paths in refused.items():
        info = results[job_id].reward_info
        assert (job_id, info["reason"]) == (job_id, "test_infrastructure_modified")
        assert info["test_infrastructure_paths"] == paths
    forged_run = results["forged-summary-fresh"].reward_info
    assert forged_run["reason"] == "tests_failed"
    assert forged_run["FAIL_TO_PASS"]["failure"] == TASK.instance["FAIL_TO_PASS"]
    removed = results["test-removed-fresh"].reward_info
    # The renamed test is back (every test file the diff touches is reset): it runs and fails.
    assert removed["reason"] == "tests_failed" and removed["tests_exit_code"] == 1
    wrap_test = f"{WRAP_TESTS}::test_long_text_is_cut_with_ellipsis"
    assert removed["PASS_TO_PASS"]["failure"] == [wrap_test]
    assert results["fake-runner-missing-fresh"].reward_info["reason"] == "tests_failed"


async def test_allowed_test_setup_changes_are_graded(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        swe_job("benign-conftest"),
        {
            **swe_job("benign-conftest", allow_test_infra_changes=["tests/conftest.py"]),
            "job_id": "benign-conftest-allowed",
        },
    ]
    async with (
        scripted_backend(0.0, attack_rules(ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=600)
    refused, allowed = results["benign-conftest-fresh"], results["benign-conftest-allowed"]
    assert (refused.outcome, refused.reward) == (Outcome.ok, 0.0), refused.error
    assert refused.reward_info["test_infrastructure_paths"] == ["tests/conftest.py"]
    assert (allowed.outcome, allowed.reward) == (Outcome.ok, 1.0), allowed.error
