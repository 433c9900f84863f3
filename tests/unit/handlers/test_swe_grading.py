"""The `swe` grader's decisions: which changed paths count as test setup, and what a pytest
run (its report and exit status) says about the listed tests."""

import json

import pytest

from agentroll.handlers.builtin.swe.swe_infra import config_changed, is_allowed, refused_by_name
from agentroll.handlers.builtin.swe.swe_pytest import PytestRun, Report, judge, parse_report
from agentroll.handlers.builtin.swe.swe_repo import Change, parse_raw_diff

F2P, P2P = ["t.py::test_fix"], ["t.py::test_kept", "u.py::test_other"]
ALL_PASS = {t: "passed" for t in (*F2P, *P2P)}


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("conftest.py", True),
        ("tests/unit/conftest.py", True),
        ("pytest.ini", True),
        ("sub/.pytest.ini", True),
        ("sitecustomize.py", True),
        ("src/usercustomize.py", True),
        ("lib/evil.pth", True),
        ("tests/pytest_hooks.py", True),
        ("pytest_helpers/__init__.py", True),
        ("pytest.py", True),
        ("_pytest/runner.py", True),
        ("src/pytest/__init__.py", True),
        ("tests/test_conftest_parsing.py", False),
        ("textkit/slug.py", False),
        ("docs/pytest.rst", False),
        ("my_pytest_notes.py", False),
        ("Conftest.py", False),
    ],
)
def test_test_setup_paths_are_known_by_name(path: str, refused: bool) -> None:
    assert refused_by_name(path) is refused


def test_allowed_paths_are_shell_patterns_or_everything() -> None:
    assert is_allowed("tests/conftest.py", True)
    assert not is_allowed("tests/conftest.py", False)
    assert not is_allowed("tests/conftest.py", [])
    assert is_allowed("src/_pytest/python/api.py", ["src/_pytest/*"])  # `*` crosses folders
    assert not is_allowed("conftest.py", ["tests/conftest.py"])


TOML_BASE = '[project]\nname = "x"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'


@pytest.mark.parametrize(
    ("name", "old", "new", "changed"),
    [
        # pyproject.toml: only pytest's tables count, exactly as TOML reads them.
        ("pyproject.toml", TOML_BASE, TOML_BASE.replace('"x"', '"y"'), False),
        ("pyproject.toml", TOML_BASE, TOML_BASE.replace('"-q"', '"-p evil"'), True),
        ("pyproject.toml", TOML_BASE, TOML_BASE + "[tool.pytest.ini_options.x]\n", True),
        ("pyproject.toml", None, '[tool.pytest.ini_options]\naddopts = "-p evil"\n', True),
        ("pyproject.toml", TOML_BASE, None, True),  # deleted: its settings are gone
        ("pyproject.toml", None, '[project]\nname = "x"\n', False),
        ("pyproject.toml", '[project]\nname = "x"\n', "[tool.pytest\n", True),  # not TOML
        ("pyproject.toml", None, "[tool]\npytest = { ini_options = { addopts = '-x' } }", True),
        # tox.ini / setup.cfg: any pytest section header, before or after, however spelled.
        ("setup.cfg", "[metadata]\nname = x\n", "[metadata]\nname = y\n", False),
        ("setup.cfg", "[metadata]\nname = x\n", "[tool:pytest]\naddopts = -p evil\n", True),
        ("setup.cfg", "[tool:pytest]\naddopts = -q\n", "[metadata]\n", True),
        ("tox.ini", None, "[testenv]\n\x0c[ Pytest ]\naddopts = -p evil\n", True),
        ("tox.ini", "[tox]\nenvlist = py3\n", "[tox]\nenvlist = py3,py4\n", False),
    ],
)
def test_pytest_configuration_changes(
    name: str, old: str | None, new: str | None, changed: bool
) -> None:
    assert config_changed(name, old, new) is changed


def test_raw_diff_records_are_parsed_with_both_sides_of_a_rename() -> None:
    raw = (
        ":100644 000000 aaa 000 D\0tests/conftest.py\0"
        ":000000 120000 000 bbb A\0pytest.ini\0"
        ":100644 100644 ccc ddd M\0we ird\tname.py\0"
    )
    assert parse_raw_diff(raw) == [
        Change("tests/conftest.py", "100644", "000000"),
        Change("pytest.ini", "000000", "120000"),
        Change("we ird\tname.py", "100644", "100644"),
    ]
    assert [c.symlink for c in parse_raw_diff(raw)] == [False, True, False]
    assert parse_raw_diff("") == []


def test_reports_that_are_not_the_plugins_are_refused() -> None:
    good = {"exitstatus": 1, "tests": {"a::b": "failed"}, "collection_errors": []}
    assert parse_report(json.dumps(good)) == Report(1, {"a::b": "failed"}, [])
    for bad in (
        "not json",
        "[]",
        json.dumps({**good, "exitstatus": "1"}),
        json.dumps({**good, "tests": {"a::b": 1}}),
        json.dumps({"exitstatus": 0, "tests": {}}),
    ):
        with pytest.raises((ValueError, KeyError, TypeError)):
            parse_report(bad)


def run(
    tests: dict[str, str] | None, exit_code: int | None = 0, exitstatus: int | None = None
) -> PytestRun:
    report = (
        None
        if tests is None
        else Report(exit_code if exitstatus is None else exitstatus, tests, [])
    )
    return PytestRun(exit_code, False, report, "" if report else "no report.json", "output")


def test_every_listed_test_passing_in_the_report_resolves() -> None:
    verdict = judge(run(ALL_PASS), F2P, P2P)
    assert (verdict.resolved, verdict.reason) == (True, "")
    assert verdict.info["FAIL_TO_PASS"] == {"success": F2P, "failure": []}
    xpassed = judge(run({**ALL_PASS, F2P[0]: "xpassed"}), F2P, P2P)
    assert xpassed.resolved


@pytest.mark.parametrize(
    ("the_run", "reason"),
    [
        # A listed test the report does not have is a failure, never skipped over.
        (run({t: "passed" for t in (*F2P, P2P[0])}), "tests_failed"),
        (run({**ALL_PASS, P2P[1]: "skipped"}), "tests_failed"),
        (run({**ALL_PASS, F2P[0]: "xfailed"}), "tests_failed"),
        (run({**ALL_PASS, F2P[0]: "failed"}, exit_code=1), "tests_failed"),
        # pytest never finished (os._exit, a crash): nothing it said can be trusted.
        (run(None, exit_code=0), "no_test_report"),
        # Exit status and report disagree: something changed the outcome after pytest.
        (run(ALL_PASS, exit_code=0, exitstatus=1), "inconsistent_test_report"),
        (run({**ALL_PASS, F2P[0]: "failed"}, exit_code=0), "inconsistent_test_report"),
        (run(ALL_PASS, exit_code=1), "inconsistent_test_report"),
        # The run broke: a collection error, an unknown test id, no tests.
        (run(ALL_PASS, exit_code=2), "test_run_broken"),
        (run({}, exit_code=4), "test_run_broken"),
        (run({}, exit_code=5), "test_run_broken"),
        (run(ALL_PASS, exit_code=-9, exitstatus=0), "inconsistent_test_report"),
        (PytestRun(None, True, None, "", ""), "tests_timed_out"),
    ],
)
def test_runs_that_do_not_resolve_the_issue_say_why(the_run: PytestRun, reason: str) -> None:
    verdict = judge(the_run, F2P, P2P)
    assert (verdict.resolved, verdict.reason) == (False, reason)
    assert verdict.detail and verdict.info["tests_output_tail"] == the_run.output_tail


def test_missing_tests_are_listed_as_failures() -> None:
    verdict = judge(run({F2P[0]: "passed", P2P[0]: "passed"}), F2P, P2P)
    assert verdict.info["missing"] == [P2P[1]]
    assert verdict.info["PASS_TO_PASS"] == {"success": [P2P[0]], "failure": [P2P[1]]}
    assert (
        verdict.detail == "1 of 3 listed tests did not pass, 1 of them missing from pytest's report"
    )
