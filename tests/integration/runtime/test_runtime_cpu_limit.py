"""`exec(cpu_limit_s=...)` in bubblewrap: the command is limited by the CPU time its own
cgroup used, not by the wall clock, so a slow node cannot time it out (where the server has
cgroups: as root; otherwise the limit is a wall-clock one, see `Sandbox.exec`)."""

from __future__ import annotations

import pytest

from agentroll.runtime import SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.runtime.sandbox import ProcessSandbox

pytestmark = pytest.mark.integration
SPIN = ["python3", "-c", "while True: pass"]


async def _metered(bwrap: BwrapRuntime) -> ProcessSandbox:
    sb = await bwrap.start(SandboxSpec(), timeout=60)
    assert isinstance(sb, ProcessSandbox)
    if sb.cgroup is None or sb.cgroup.cpu_seconds() is None:
        await sb.stop()
        pytest.skip("no cgroup counts CPU time here (a non-root server)")
    return sb


async def test_a_spinning_command_is_stopped_by_its_cpu_time(bwrap: BwrapRuntime) -> None:
    sb = await _metered(bwrap)
    try:
        done = await sb.exec(SPIN, timeout=300, cpu_limit_s=1.0)
        assert done.timed_out and done.exit_code is None
        assert done.cpu_s is not None and 1.0 <= done.cpu_s < 30, done
    finally:
        await sb.stop()


async def test_waiting_costs_no_cpu_time_so_it_outlasts_the_limit(bwrap: BwrapRuntime) -> None:
    """Two seconds asleep against a 0.5 s CPU limit: a wall-clock limit would have killed it."""
    sb = await _metered(bwrap)
    try:
        done = await sb.exec(["sh", "-c", "sleep 2; echo awake"], timeout=300, cpu_limit_s=0.5)
        assert (done.timed_out, done.exit_code, done.stdout) == (False, 0, "awake\n"), done
        assert done.cpu_s is not None and done.cpu_s < 0.5
    finally:
        await sb.stop()


async def test_the_command_runs_in_a_cgroup_of_its_own_that_goes_away(
    bwrap: BwrapRuntime,
) -> None:
    sb = await _metered(bwrap)
    assert sb.cgroup is not None
    try:
        done = await sb.exec(["cat", "/proc/self/cgroup"], timeout=60, cpu_limit_s=10)
        assert f"/agentroll/{sb.id}/exec-" in done.stdout, done.stdout
        plain = await sb.exec(["cat", "/proc/self/cgroup"], timeout=60)
        assert "/exec-" not in plain.stdout and f"/agentroll/{sb.id}" in plain.stdout
        for path in sb.cgroup.paths:  # no child cgroup is left behind
            assert not [p for p in path.iterdir() if p.is_dir()], path
        share = sb.cgroup.dirs.get("cpu")
        if share is not None:  # back to the default share once no graded exec runs
            assert (share / "cpu.shares").read_text().strip() in ("1024", "")
    finally:
        await sb.stop()
