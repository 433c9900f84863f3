"""The `swe` grader's pytest plugin and launcher: every test's outcome, as JSON, on a channel
no file holds.

Uploaded at EVAL under a fresh random name into the grader's private scratch folder. It is
either the program pytest runs from (`python -I <this file> ARGS`, see `swe_pytest`) or, where
the instance's test command is a whole script, a plugin loaded with `-p`. Either way, when the
session finishes it writes the report to the descriptor named by `AGENTROLL_REPORT_FD` (the
grader's own pipe):

    {"exitstatus": 1, "tests": {"tests/test_x.py::test_y": "passed", ...},
     "collection_errors": ["tests/test_z.py"]}

The first thing it does, before importing anything but `os` (already loaded by the
interpreter's start-up, so no file can stand in for it), is to take that descriptor for itself
(a private, close-on-exec copy; the inherited one is closed, so no process the tests start
inherits it) and make pytest's process non-dumpable, so no other process of the sandbox's
user can reach the copy through `/proc`. A process the tests leave behind cannot write the
report; only code inside pytest's own process could.

As the launcher, it runs under `python -I`: no `PYTHON*` variable, no user site, and neither
the working directory nor this file's folder on `sys.path`, so the channel and pytest itself
(with everything pytest imports at start) come from the interpreter's own library before any
folder of the repository is on the path. Only then does it put the working directory and
`$PYTHONPATH` on the path, as `python -m pytest` would, but after the standard library's
folders: no module of the repository can stand in for a standard one, whenever it is first
imported, while the repository's own code still comes before an installed copy of it. (pytest
itself puts the folders of test modules outside packages first: the `swe` grader resets
every test file the diff touches and refuses modules named like installed ones, `swe_shadow`.)

A test's status comes from pytest's own reports of its phases, the worst phase winning:
"error" (setup or teardown failed), "failed" (the test failed), "skipped", "xfailed",
"xpassed", "passed". Nothing the tests print can reach the report.

It runs inside the repository's own interpreter, whatever its age: standard library only,
Python 3.6 syntax, annotations in type comments.
"""

import os

PR_SET_DUMPABLE = 4


def _take_report_channel():
    # type: () -> int
    try:  # a pytest-xdist worker inherits the variable, not the descriptor: it never reports
        inherited = int(os.environ.pop("AGENTROLL_REPORT_FD"))
        private = os.dup(inherited)  # not inheritable (Python >= 3.4)
    except (KeyError, ValueError, OSError):
        return -1
    os.close(inherited)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: the descriptor is still private to this process tree
    return private


_CHANNEL = _take_report_channel()

import json  # noqa: E402 (after the channel is ours)
import sys  # noqa: E402
from typing import Any  # noqa: E402,F401 (used in the type comments)

import pytest  # noqa: E402

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
    if _CHANNEL < 0:
        return
    data = json.dumps(report).encode()
    while data:
        data = data[os.write(_CHANNEL, data) :]
    os.close(_CHANNEL)


def _launch():
    # type: () -> int
    """pytest with this module as a plugin, and the repository's folders (the working
    directory, then `$PYTHONPATH`, as `python -m pytest` has them) on the path after the
    standard library's and before the installed packages'."""
    repository = [os.getcwd()]
    repository += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    installed = [
        i
        for i, entry in enumerate(sys.path)
        if os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages")
    ]
    at = installed[0] if installed else len(sys.path)
    sys.path[at:at] = repository
    return int(pytest.main(sys.argv[1:], plugins=[sys.modules[__name__]]))


if __name__ == "__main__":
    sys.exit(_launch())
