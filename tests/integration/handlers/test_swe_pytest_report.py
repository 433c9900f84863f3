"""The `swe` grader's pytest plugin under a real pytest: one status per test from pytest's
own reports (whatever the tests print), the session's exit status, collection errors."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.swe.swe_pytest import plugin_source

pytestmark = pytest.mark.integration
PLUGIN = "agentroll_report_test"

TESTS = """import pytest


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup")


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")


def test_passes():
    print("FAILED test_a.py::test_passes")


def test_fails():
    print("PASSED test_a.py::test_fails")
    assert False


def test_setup_error(broken_setup):
    pass


def test_teardown_error(broken_teardown):
    pass


def test_skipped():
    pytest.skip("not here")


@pytest.mark.xfail
def test_xfailed():
    assert False


@pytest.mark.xfail
def test_xpassed():
    pass


@pytest.mark.xfail(strict=True)
def test_strict_xpass():
    pass


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x == 1
"""


CHANNEL_PROBE = """import ctypes, os, subprocess, sys

PR_GET_DUMPABLE = 3


def test_channel_out_of_reach():
    assert "AGENTROLL_REPORT_FD" not in os.environ
    child = "import os; os.write(3, b'forged')"
    assert subprocess.run([sys.executable, "-c", child]).returncode != 0  # no fd 3 inherited
    # Not dumpable: no process of the same user (without capabilities) can open its fds.
    assert ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
"""


def run_pytest(repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """pytest with the plugin, its report read from the pipe the plugin is given (fd 3)."""
    plugin = repo.parent / "plugin"
    plugin.mkdir(exist_ok=True)
    (plugin / f"{PLUGIN}.py").write_bytes(plugin_source())
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as report_pipe:
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PLUGIN]
        proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3>&{write_end}', "bash", *pytest, *args],
            cwd=repo,
            env={"PYTHONPATH": str(plugin), "PATH": "/usr/bin:/bin", "AGENTROLL_REPORT_FD": "3"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write_end,),
        )
        os.close(write_end)
        output, _ = proc.communicate(timeout=120)
        report = json.loads(report_pipe.read() or b"null")
    assert report is not None, output.decode()[-2000:]
    return proc.returncode, report


def test_the_report_channel_is_private_to_pytest(tmp_path: Path) -> None:
    """A process the tests start inherits no report channel and cannot reach pytest's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_c.py").write_text(CHANNEL_PROBE)
    exit_code, report = run_pytest(repo, "test_c.py")
    assert (exit_code, report["tests"]) == (0, {"test_c.py::test_channel_out_of_reach": "passed"})


def test_each_test_gets_the_status_pytest_gave_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_a.py").write_text(TESTS)
    exit_code, report = run_pytest(repo, "test_a.py")
    assert exit_code == report["exitstatus"] == 1
    assert report["tests"] == {
        "test_a.py::test_passes": "passed",
        "test_a.py::test_fails": "failed",
        "test_a.py::test_setup_error": "error",
        "test_a.py::test_teardown_error": "error",
        "test_a.py::test_skipped": "skipped",
        "test_a.py::test_xfailed": "xfailed",
        "test_a.py::test_xpassed": "xpassed",
        "test_a.py::test_strict_xpass": "failed",
        "test_a.py::test_param[1]": "passed",
        "test_a.py::test_param[2]": "failed",
    }
    assert report["collection_errors"] == []


def test_a_module_that_cannot_be_imported_breaks_the_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (repo / "tests" / "test_b.py").write_text("import not_a_module\n\n\ndef test_b():\n    pass\n")
    exit_code, report = run_pytest(repo, "tests/test_ok.py::test_ok", "tests/test_b.py::test_b")
    # Interrupted (2), or since pytest 8 "found no collectors" for the listed id (4).
    assert exit_code == report["exitstatus"] in (2, 4)
    assert report["collection_errors"] == ["tests/test_b.py"]
    assert report["tests"] == {}  # interrupted before any test ran
