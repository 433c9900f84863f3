"""How the action server names what it applies and what happened (pure functions)."""

import resource
import subprocess

import pytest

from agentroll.runtime.action.children import describe_exit, doomed
from agentroll.runtime.action.guard import parse_rlimit


def test_rlimits_use_prlimits_names() -> None:
    assert parse_rlimit("nproc=64") == (resource.RLIMIT_NPROC, 64)
    assert parse_rlimit("as=1073741824") == (resource.RLIMIT_AS, 1 << 30)
    for bad in ("nproc", "nproc=-1", "stack=5", "cpu=lots"):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            parse_rlimit(bad)


def test_exits_are_described_for_the_agent() -> None:
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9) == "was killed by signal 9 (SIGKILL, e.g. out of memory or kill -9)"
    assert describe_exit(-15) == "was killed by signal 15 (SIGTERM)"
    assert describe_exit(None) == "exited"


def test_a_process_is_doomed_once_it_exits_not_before() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not doomed(proc.pid)  # alive, nothing pending
        proc.kill()
        assert doomed(proc.pid)  # from the moment it is sent: pending, exiting, then a zombie
    finally:
        proc.kill()
        proc.wait(10)
    assert doomed(proc.pid)  # reaped: gone
