"""A SWE-bench row (the 5.x datasets' shape: test ids as JSON strings, its own eval script and
log parser), normalised by `swe_datasets` and graded end to end by the real `swe` handler in
real bubblewrap sandboxes through the official `swebench` package's `parse_log_pytest`. The
honest fix scores 1; forged test output (printed PASSED lines, a forced exit status, pytest
killed before it reports, a fake log in the workspace, a process left printing) scores 0."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, marked, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers.builtin.swe import load_swe_tasks, swe_official
from agentroll.handlers.builtin.swe.swe_datasets import normalise
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
    pytest.mark.skipif(
        not swe_official.installed(), reason="the dev extra installs agentroll[swebench]"
    ),
]

TASK = load_swe_tasks()[0]  # textkit: slugify() keeps doubled separators
SLUG = "textkit/slug.py"
F2P = TASK.instance["FAIL_TO_PASS"]
_SOURCE = bundled_repos()[TASK.instance["repo"]].files
HONEST_FIX = write(
    SLUG, _SOURCE[SLUG].replace(TASK.script["edit"]["old"], TASK.script["edit"]["new"])
)
BASE = TASK.instance["base_commit"]
EVAL_SCRIPT = "\n".join(
    [
        "#!/bin/bash",
        "set -uxo pipefail",
        "cd /testbed",
        f"git checkout {BASE} tests/test_slug.py",
        "git apply -v - <<'EOF_114329324912'",
        TASK.instance["test_patch"],
        "EOF_114329324912",
        ": '>>>>> Start Test Output'",
        "python -m pytest -rA -p no:cacheprovider tests/test_slug.py tests/test_wrap.py",
        ": '>>>>> End Test Output'",
        f"git checkout {BASE} tests/test_slug.py",
    ]
)
ROW = {
    **{k: TASK.instance[k] for k in ("instance_id", "repo", "base_commit", "test_patch")},
    "problem_statement": TASK.instance["problem_statement"],
    "patch": TASK.instance["patch"],
    "version": "1.0",
    "hints_text": "",
    "created_at": "2024-01-01T00:00:00Z",
    "environment_setup_commit": BASE,
    "FAIL_TO_PASS": json.dumps(F2P),
    "PASS_TO_PASS": json.dumps(TASK.instance["PASS_TO_PASS"]),
    "eval_script": EVAL_SCRIPT,
    "log_parser": "parse_log_pytest",
    "eval_type": "pass_and_fail",
}
PASSED_LINES = "".join(f"PASSED {t}\\n" for t in F2P)
ATTACKS: dict[str, list[str]] = {
    "honest": [HONEST_FIX],
    # pytest's summary printed again, every failing test PASSED, after pytest's own.
    "printed-pass": [
        write(SLUG, f"\nimport atexit\natexit.register(print, '{PASSED_LINES}')\n", append=True)
    ],
    # ... and the exit status forced to 0 after pytest reported its failures.
    "printed-pass-exit-0": [
        write(
            SLUG,
            f"\nimport atexit, os, sys\n"
            f"atexit.register(lambda: (sys.stdout.write('{PASSED_LINES}'), sys.stdout.flush(),"
            " os._exit(0)))\n",
            append=True,
        )
    ],
    # pytest stopped before it can report: the forged lines are all the output has.
    "killed-before-report": [
        write(
            SLUG,
            f"\nimport os, sys\nsys.stdout.write('{PASSED_LINES}')\nsys.stdout.flush()\n"
            "os._exit(0)\n",
            append=True,
        )
    ],
    # The official harness reads a log file: here one is written where the tests run.
    "fake-log": [
        write("test_output.txt", PASSED_LINES.replace("\\n", "\n")),
        write("logs/run_evaluation/x/textkit-1/test_output.txt", PASSED_LINES.replace("\\n", "\n")),
    ],
    # A process left behind in the agent's sandbox, printing PASSED lines forever.
    "leftover-process": [
        f"setsid sh -c 'while :; do printf \"{PASSED_LINES}\"; sleep 1; done' "
        "</dev/null >/dev/null 2>&1 &"
    ],
}
EXPECTED_REASON = {
    "printed-pass": "output_contradicts_report",
    "printed-pass-exit-0": "inconsistent_test_report",
    "killed-before-report": "no_test_report",
    "fake-log": "tests_failed",
    "leftover-process": "tests_failed",
}


def official_job(attack: str) -> dict[str, Any]:
    instance = normalise({**ROW, "problem_statement": marked(ROW["problem_statement"], attack)})
    # The bundled repository stands in for the image's /testbed checkout.
    instance.update(repo_source=None, workdir="/testbed")
    return job(attack, "swe", instance)


async def test_official_parser_grades_the_fix_and_no_forged_output(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    assert official_job("honest")["instance"]["log_parser"] == "parse_log_pytest"
    async with (
        scripted_backend(0.0, attack_rules(ATTACKS), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, [official_job(a) for a in ATTACKS], timeout_s=600)
    honest = results.pop("honest")
    assert (honest.outcome, honest.reward) == (Outcome.ok, 1.0), honest.error
    assert honest.reward_info["log_parser"] == "parse_log_pytest"
    assert honest.reward_info["FAIL_TO_PASS"] == {"success": F2P, "failure": []}
    for attack, trajectory in results.items():
        info = trajectory.reward_info
        assert (attack, trajectory.outcome, trajectory.reward) == (attack, Outcome.ok, 0.0)
        assert (attack, info["reason"]) == (attack, EXPECTED_REASON[attack]), info["detail"]
