"""A CPU-limited exec's child cgroup on v1 and v2 layouts (directories standing in for
cgroupfs, with the files the kernel would create written by hand), and its wall backstop."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentroll.runtime import Limits, cpulimit
from agentroll.runtime.cgroup import SandboxCgroup, find_bases
from agentroll.runtime.cpulimit import GradingUsage, grading_usage, grading_wall_s

V1 = ("pids", "memory", "cpu", "cpuacct")


def _v1_sandbox(root: Path) -> SandboxCgroup:
    bases = {}
    for ctrl in V1:
        (root / ctrl).mkdir()
        bases[ctrl] = (root / ctrl, False)
    cgroup = SandboxCgroup.create("sb1", Limits(), bases=bases)
    assert cgroup is not None
    return cgroup


def test_v1_cpu_accounting_is_found_in_its_own_hierarchy() -> None:
    mountinfo = (
        "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        "33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
    )
    bases = find_bases(mountinfo, "2:cpuacct:/\n1:cpu:/\n")
    assert bases["cpuacct"] == (Path("/sys/fs/cgroup/cpuacct"), False)


def test_v1_child_counts_its_cpu_time_and_lives_under_the_sandbox(tmp_path: Path) -> None:
    sandbox = _v1_sandbox(tmp_path)
    acct = sandbox.dirs["cpuacct"] / "exec-1"
    acct.mkdir()
    (acct / "cpuacct.usage").write_text("2500000000\n")  # nanoseconds
    child = sandbox.child("exec-1")
    assert child is not None and child.cpu_seconds() == 2.5
    assert child.dirs == {c: sandbox.dirs[c] / "exec-1" for c in V1}
    # Its members are the sandbox's (teardown kills them); removal takes children first.
    (child.dirs["pids"] / "cgroup.procs").write_text("41\n")
    assert sandbox.pids() == [41]
    for path in [*child.paths, *sandbox.paths]:  # cgroupfs has no files to delete; this has
        for f in path.iterdir():
            if f.is_file():
                f.unlink()
    assert sandbox.remove() and not any(p.exists() for p in sandbox.paths)


def test_v1_child_needs_cpu_accounting(tmp_path: Path) -> None:
    bases = {}
    for ctrl in ("pids", "memory", "cpu"):
        (tmp_path / ctrl).mkdir()
        bases[ctrl] = (tmp_path / ctrl, False)
    sandbox = SandboxCgroup.create("sb1", Limits(), bases=bases)
    assert sandbox is not None and sandbox.cpu_seconds() is None
    assert sandbox.child("exec-1") is None  # the exec's limit is then a wall-clock one
    assert [p for p in sandbox.dirs["pids"].iterdir() if p.is_dir()] == []


def test_v2_child_reads_usage_from_cpu_stat(tmp_path: Path) -> None:
    (tmp_path / "agentroll").mkdir()
    (tmp_path / "agentroll" / "cgroup.subtree_control").write_text("pids memory cpu\n")
    bases = {c: (tmp_path, True) for c in ("pids", "memory", "cpu")}
    sandbox = SandboxCgroup.create("sb2", Limits(), bases=bases)
    assert sandbox is not None
    stat = sandbox.paths[0] / "exec-2"
    stat.mkdir()
    (stat / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
    child = sandbox.child("exec-2")
    assert child is not None and child.paths == [stat] and child.cpu_seconds() == 1.25


def test_the_cpu_share_is_a_multiple_of_the_default(tmp_path: Path) -> None:
    sandbox = _v1_sandbox(tmp_path)
    sandbox.set_cpu_share(4)
    assert (sandbox.dirs["cpu"] / "cpu.shares").read_text() == "4096"
    sandbox.set_cpu_share(1)
    assert (sandbox.dirs["cpu"] / "cpu.shares").read_text() == "1024"


def test_the_wall_backstop_is_generous_but_ends_inside_the_grading_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpulimit.time, "monotonic", lambda: 1000.0)
    assert grading_wall_s(60) == 60 * 4 + 30  # no stage bounds it (INIT's probes)
    token = grading_usage.set(GradingUsage(deadline=1200.0))
    try:
        assert grading_wall_s(60) == 200  # the stage ends first
        assert grading_wall_s(60, reserve_s=120) == 80  # what the grader does afterwards
        assert grading_wall_s(150, reserve_s=120) == 150  # never below the CPU limit itself
        assert grading_wall_s(10) == 70
    finally:
        grading_usage.reset(token)


def test_grading_usage_adds_up_and_counts_unmeasured_execs() -> None:
    usage = GradingUsage()
    usage.add(2.0, 1.5)
    usage.add(3.0, None)
    assert (usage.wall_s, usage.cpu_s, usage.unmeasured) == (5.0, 1.5, 1)
