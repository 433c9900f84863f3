"""The `swe` grader's pytest plugin: every test's outcome, as JSON, where the agent's tree is not.

Uploaded at EVAL under a fresh random module name into a folder outside the repository and
loaded with `-p`; when the session finishes it writes `report.json` beside itself:

    {"exitstatus": 1, "tests": {"tests/test_x.py::test_y": "passed", ...},
     "collection_errors": ["tests/test_z.py"]}

A test's status comes from pytest's own reports of its phases, the worst phase winning:
"error" (setup or teardown failed), "failed" (the test failed), "skipped", "xfailed",
"xpassed", "passed". Nothing the tests print can reach the report.

It runs inside the repository's own interpreter, whatever its age: standard library only,
Python 3.6 syntax, annotations in type comments.
"""

import json
import os
from typing import Any  # noqa: F401 (used in the type comments)

import pytest

_REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.json")
_RANK = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 2}
_tests = {}  # type: dict[str, str]
_collection_errors = []  # type: list[str]


def _status(report):
    # type: (Any) -> str | None
    """What one phase's report says about its test; None when it adds nothing."""
    expected_to_fail = hasattr(report, "wasxfail")
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "xfailed" if expected_to_fail else "skipped"
    if report.when == "call":
        return "xpassed" if expected_to_fail else "passed"
    return None


def pytest_runtest_logreport(report):
    # type: (Any) -> None
    status = _status(report)
    if status is None:
        return
    before = _tests.get(report.nodeid)
    if before is None or _RANK[status] > _RANK[before]:
        _tests[report.nodeid] = status


def pytest_collectreport(report):
    # type: (Any) -> None
    if report.failed:
        _collection_errors.append(report.nodeid)


@pytest.hookimpl(trylast=True)  # after any plugin that still changes the exit status
def pytest_sessionfinish(session):
    # type: (Any) -> None
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller reports
        return
    report = {
        "exitstatus": int(session.exitstatus),
        "tests": _tests,
        "collection_errors": _collection_errors,
    }
    partial = _REPORT + ".partial"
    with open(partial, "w") as fh:
        json.dump(report, fh)
    os.replace(partial, _REPORT)
