"""The verifier wrapper's report: trusted only as its last line and when it exited by itself."""

import subprocess
from pathlib import Path

import pytest

from agentroll.handlers.builtin.harbor.containment import (
    ACTION_SERVER,
    MARK,
    contained,
    read_report,
)


def test_a_clean_run_reports_the_test_scripts_status() -> None:
    report = read_report(f"{MARK} status=1 frozen=1 left=\n", 0)
    assert (report.status, report.frozen, report.left, report.disrupted) == (1, True, (), None)


def test_processes_left_alive_disrupt_the_run() -> None:
    report = read_report(f"{MARK} status=0 frozen=1 left=12 40\n", 0)
    assert report.left == (12, 40)
    assert report.disrupted == "2 process(es) the tests started outlived the test script: 12, 40"


def test_orphans_reaped_while_the_tests_ran_disrupt_a_run_that_left_nothing_alive() -> None:
    report = read_report(f"{MARK} status=0 frozen=1 left=\n", 0, orphans=2)
    assert report.disrupted == (
        "2 process(es) the tests started outlived their parent and exited before the freeze"
    )
    assert read_report(f"{MARK} status=0 frozen=1 left=\n", 0, orphans=0).disrupted is None


def test_a_wrapper_killed_or_a_forged_line_before_the_real_one_is_no_clean_report() -> None:
    forged = f"{MARK} status=0 frozen=1 left=\n"
    killed = read_report(forged, -9)  # the tests' code wrote the line, then killed the wrapper
    assert killed.status is None and "own shell was killed" in (killed.disrupted or "")
    last = read_report(forged + f"{MARK} status=0 frozen=1 left=7\n", 0)
    assert last.left == (7,)
    trailing = read_report(forged + "something after\n", 0)
    assert trailing.status is None


def test_the_wrapper_freezes_only_where_the_action_server_is_the_namespaces_init() -> None:
    script = contained("bash /tests/test.sh")
    assert 'case " ${init[*]} " in *" agentroll.runtime.action "*) frozen=1' in script
    # Nothing but the status between the test script's end and the freeze: every step there
    # is time in which a process it left can still write.
    assert 'bash /tests/test.sh\nstatus=$?\n[ "$frozen" = 1 ] && kill -STOP -1' in script


@pytest.mark.skipif(
    ACTION_SERVER.encode() in Path("/proc/1/cmdline").read_bytes(),
    reason="this test process runs inside an agentroll sandbox: the wrapper would freeze it",
)
def test_outside_a_sandbox_of_its_own_the_wrapper_neither_freezes_nor_lists_the_hosts_processes(
    tmp_path: Path,
) -> None:
    """Where pid 1 is not the action server (the `local` runtime), `kill -1` would reach the
    host and `/proc` lists its processes: the wrapper only runs the script and reports."""
    done = subprocess.run(
        ["bash", "-c", contained(f"bash -c 'sleep 0.2 & echo ran > {tmp_path}/out; exit 3'")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = read_report(done.stdout, done.returncode)
    assert (report.status, report.frozen, report.left) == (3, False, ())
    assert (tmp_path / "out").read_text() == "ran\n"
