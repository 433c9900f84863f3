"""Grading by the official log parser: printed output alone never resolves an instance. The
exit status must agree with the output, pytest's own report (when the runner is pytest) must
not contradict it, and every listed test must be in it and pass."""

import asyncio

import pytest

from agentroll.handlers.builtin.swe import swe_official
from agentroll.handlers.builtin.swe.swe_log import LoggedRun, judge_log, parse
from agentroll.handlers.builtin.swe.swe_pytest import Report
from agentroll.handlers.errors import InfraError

F2P, P2P = ["t.py::test_fix"], ["t.py::test_kept"]
HONEST_OUTPUT = "PASSED t.py::test_fix\nPASSED t.py::test_kept\n"
ALL_PASSED = {"t.py::test_fix": "PASSED", "t.py::test_kept": "PASSED"}
PYTEST_ALL_PASSED = Report(0, {"t.py::test_fix": "passed", "t.py::test_kept": "passed"}, [])
PYTEST_FIX_FAILED = Report(1, {"t.py::test_fix": "failed", "t.py::test_kept": "passed"}, [])


def run(
    exit_code: int | None = 0,
    report: Report | None = PYTEST_ALL_PASSED,
    *,
    timed_out: bool = False,
    disrupted: str = "",
    truncated: bool = False,
) -> LoggedRun:
    problem = "" if report else "pytest ended without writing its report"
    return LoggedRun(exit_code, timed_out, disrupted, HONEST_OUTPUT, truncated, report, problem)


def test_an_honest_pytest_run_resolves() -> None:
    verdict = judge_log(run(), ALL_PASSED, F2P, P2P, pytest_report=True)
    assert (verdict.resolved, verdict.reason) == (True, "")
    assert verdict.info["FAIL_TO_PASS"] == {"success": F2P, "failure": []}


@pytest.mark.parametrize(
    ("logged", "statuses", "pytest_report", "reason"),
    [
        # "PASSED t.py::test_fix" printed after pytest saw it fail.
        (run(1, PYTEST_FIX_FAILED), ALL_PASSED, True, "output_contradicts_report"),
        # ... and an exit status of 0 forced after pytest reported 1.
        (run(0, PYTEST_FIX_FAILED), ALL_PASSED, True, "inconsistent_test_report"),
        # ... or pytest killed (os._exit) before it could report.
        (run(0, None), ALL_PASSED, True, "no_test_report"),
        # Another runner: every failure overwritten by printed lines, the runner still failed.
        (run(1, None), ALL_PASSED, False, "test_run_broken"),
        # The runner succeeded, yet its output has a failure: not a result either.
        (run(0, None), {**ALL_PASSED, "u.py::x": "FAILED"}, False, "inconsistent_test_output"),
        (run(0, None), {"t.py::test_fix": "PASSED"}, False, "tests_failed"),  # one missing
        (run(1, None), {**ALL_PASSED, "t.py::test_fix": "FAILED"}, False, "tests_failed"),
        (run(1, None), {**ALL_PASSED, "t.py::test_fix": "SKIPPED"}, False, "test_run_broken"),
        (run(None, None, timed_out=True), None, False, "tests_timed_out"),
        (
            run(None, disrupted="the grader's wrapper ended with status 137"),
            None,
            True,
            "test_run_disrupted",
        ),
        (run(truncated=True), ALL_PASSED, True, "test_output_too_large"),
        (run(), None, True, "test_output_unparseable"),
    ],
)
def test_output_that_is_not_an_honest_pass_earns_nothing(
    logged: LoggedRun, statuses: dict[str, str] | None, pytest_report: bool, reason: str
) -> None:
    verdict = judge_log(logged, statuses, F2P, P2P, pytest_report=pytest_report)
    assert (verdict.resolved, verdict.reason) == (False, reason)
    assert verdict.info["tests_output_tail"] == HONEST_OUTPUT


def test_a_failing_test_that_is_not_listed_is_allowed_with_a_failing_exit_status() -> None:
    report = Report(1, {**PYTEST_ALL_PASSED.tests, "t.py::test_broken_before": "failed"}, [])
    statuses = {**ALL_PASSED, "t.py::test_broken_before": "FAILED"}
    verdict = judge_log(run(1, report), statuses, F2P, P2P, pytest_report=True)
    assert (verdict.resolved, verdict.reason) == (True, "")


@pytest.mark.skipif(not swe_official.installed(), reason="dev installs agentroll[swebench]")
def test_the_official_parser_runs_in_a_worker_process() -> None:
    statuses = asyncio.run(
        parse(
            "parse_log_pytest",
            "FAILED t.py::test_fix - AssertionError\nPASSED t.py::test_kept\n",
            instance_id="x__y-1",
            repo="x/y",
            version="1.0",
        )
    )
    assert statuses == {"t.py::test_fix": "FAILED", "t.py::test_kept": "PASSED"}


@pytest.mark.skipif(not swe_official.installed(), reason="dev installs agentroll[swebench]")
def test_a_parser_the_package_does_not_have_is_an_infra_error() -> None:
    with pytest.raises(InfraError, match="swebench has no parser 'parse_log_no_such_runner'"):
        asyncio.run(parse("parse_log_no_such_runner", "", instance_id="x", repo="x/y", version="1"))
