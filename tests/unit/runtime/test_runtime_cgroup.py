"""Per-sandbox cgroups on v1 and v2 layouts (directories standing in for cgroupfs)."""

from __future__ import annotations

from pathlib import Path

from agentroll.runtime import Limits
from agentroll.runtime.cgroup import SandboxCgroup, find_bases

MiB = 1 << 20
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_OWN = "8:pids:/\n4:memory:/jobs/abc\n1:cpu:/\n0::/\n"


def test_v1_controllers_are_found_in_their_own_hierarchies() -> None:
    bases = find_bases(HYBRID_MOUNTINFO, HYBRID_OWN)
    assert bases == {
        "pids": (Path("/sys/fs/cgroup/pids"), False),
        "memory": (Path("/sys/fs/cgroup/memory/jobs/abc"), False),
        "cpu": (Path("/sys/fs/cgroup/cpu"), False),
    }


def test_a_pure_v2_host_offers_every_controller_in_one_directory() -> None:
    mountinfo = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    bases = find_bases(mountinfo, "0::/system.slice/agentroll.service\n")
    base = Path("/sys/fs/cgroup/system.slice/agentroll.service")
    assert bases == {c: (base, True) for c in ("pids", "memory", "cpu")}


def _v1_tree(root: Path) -> dict[str, tuple[Path, bool]]:
    bases = {}
    for ctrl in ("pids", "memory", "cpu"):
        (root / ctrl).mkdir()
        bases[ctrl] = (root / ctrl, False)
    return bases


def test_v1_sandbox_gets_its_limits_in_every_hierarchy(tmp_path: Path) -> None:
    bases = _v1_tree(tmp_path)
    limits = Limits(max_processes=64, max_total_memory_bytes=512 * MiB)
    (tmp_path / "memory" / "agentroll" / "sb1").mkdir(parents=True)
    (tmp_path / "memory" / "agentroll" / "sb1" / "memory.memsw.limit_in_bytes").write_text("")
    cgroup = SandboxCgroup.create("sb1", limits, bases=bases)
    assert cgroup is not None
    assert cgroup.dirs == {c: tmp_path / c / "agentroll" / "sb1" for c in ("pids", "memory", "cpu")}
    assert (cgroup.dirs["pids"] / "pids.max").read_text() == "64"
    memory = cgroup.dirs["memory"]
    assert (memory / "memory.limit_in_bytes").read_text() == str(512 * MiB)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(512 * MiB)  # no swap
    assert (cgroup.dirs["cpu"] / "cpu.shares").read_text() == "1024"
    assert cgroup.procs_files() == [p / "cgroup.procs" for p in cgroup.paths]
    for f in cgroup.procs_files():
        f.write_text("7\n")  # the kernel's cgroupfs lists members one per line
    assert cgroup.pids() == [7]


def test_v2_sandbox_enables_the_controllers_for_its_parent(tmp_path: Path) -> None:
    (tmp_path / "agentroll").mkdir()
    (tmp_path / "agentroll" / "cgroup.subtree_control").write_text("pids\n")
    bases = {c: (tmp_path, True) for c in ("pids", "memory", "cpu")}
    cgroup = SandboxCgroup.create("sb2", Limits(max_total_memory_bytes=256 * MiB), bases=bases)
    assert cgroup is not None and cgroup.paths == [tmp_path / "agentroll" / "sb2"]
    sandbox = cgroup.paths[0]
    assert (sandbox / "pids.max").read_text() == "256"
    assert (sandbox / "memory.max").read_text() == str(256 * MiB)
    assert (sandbox / "cpu.weight").read_text() == "100"
    # One write per missing controller (the kernel's file keeps them all; this one the last).
    assert (tmp_path / "agentroll" / "cgroup.subtree_control").read_text() == "+cpu"


def test_unwritable_cgroups_mean_none(tmp_path: Path) -> None:
    assert SandboxCgroup.create("sb3", Limits(), bases={}) is None
    missing = {"pids": (tmp_path / "nope", False)}
    assert SandboxCgroup.create("sb3", Limits(), bases=missing) is None  # no parent to make
