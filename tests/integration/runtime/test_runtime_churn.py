"""200 rollouts cancelled at random points leave no process, lease, cgroup or directory."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP, make_config

from agentroll.runtime import SandboxSpec, procs
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.warm_pool import WarmPool

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")]


def owned_processes(state_dir: Path, sandbox_ids: Sequence[str] = ()) -> list[int]:
    """Processes of this test's sandboxes: by their id marker, or by our state dir on the
    cmdline (a sandbox cancelled mid-start has no id the test knows)."""
    marker, ids = str(state_dir).encode(), set(sandbox_ids)
    return [p.pid for p in procs.scan() if p.sandbox_id in ids or marker in p.cmdline]


async def rollout(rt: BaseRuntime, started: list[str]) -> None:
    sb = await rt.start(SandboxSpec(), timeout=60)
    started.append(sb.id)
    try:
        await sb.tools.bash("sleep 0.05; echo step", timeout=10)
        await sb.exec(["sh", "-c", "sleep 30 & sleep 30"], timeout=30)
    finally:
        await sb.stop(grace_s=0.5)


async def test_200_cancelled_rollouts_leave_nothing(state_dir: Path) -> None:
    before = set(owned_processes(state_dir))
    rt = make_config("bwrap", state_dir).build()
    rng = random.Random(7)
    gate = asyncio.Semaphore(25)
    started: list[str] = []

    async def one() -> None:
        async with gate:
            task = asyncio.create_task(rollout(rt, started))
            await asyncio.sleep(rng.uniform(0, 1.2))
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    await asyncio.gather(*(one() for _ in range(200)))
    assert rt.live == []
    assert set(owned_processes(state_dir, started)) <= before
    assert list(rt.leases.dir.iterdir()) == []
    assert list(rt.state.sandboxes.iterdir()) == []
    assert list(rt.state.addresses.iterdir()) == []
    for base, _ in SandboxCgroup.bases().values():
        if (base / "agentroll").exists():
            # Only this test's sandboxes: other servers on the machine may have live ones.
            left = {p.name for p in (base / "agentroll").iterdir() if p.is_dir()}
            assert started and left.isdisjoint(started)
    await rt.close()


async def test_warm_pool_hands_out_ready_sandboxes(state_dir: Path) -> None:
    rt = make_config("bwrap", state_dir).build()
    pool = WarmPool(rt, size=2)
    spec = SandboxSpec(env={"ROLE": "pooled"})
    await pool.warm(spec)
    assert pool.idle(spec) == 2
    sb = await pool.acquire(spec.model_copy(update={"label": "job-1"}), timeout=30)
    assert sb.spec.label == "job-1"
    assert (await sb.tools.bash("echo $ROLE", timeout=10)).output.strip() == "pooled"
    other = await pool.acquire(SandboxSpec(env={"ROLE": "fresh"}), timeout=30)  # no pool
    assert (await other.tools.bash("echo $ROLE", timeout=10)).output.strip() == "fresh"
    await asyncio.gather(sb.stop(), other.stop())
    await pool.close()
    assert pool.idle(spec) == 0
    await rt.close()
    assert rt.live == [] and list(rt.leases.dir.iterdir()) == []
