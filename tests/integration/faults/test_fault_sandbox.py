"""Sandbox faults mid-rollout: the sandbox killed mid-tool-call (from outside, by the process
group its lease records) and the reward stage crashing each end `infra_error` with a cause and
no reward, and leave no process behind. The agent's own command killing the action server is
not a fault: the server survives it and the rollout goes on. A grading sandbox lost mid-EVAL
is replaced, never scored 0."""

import asyncio
import os
import shutil
import signal
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.faults.fault_handlers import VICTIM, fault_registry, started
from tests.integration.handlers.harness import rollout_service, scripted_backend

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.runtime import BwrapConfig, procs
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.sandboxes import lease_ids, leases, sandbox_pids
from agentroll.trainer_clients import AsyncRolloutClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]


async def strike(
    agentroll_server: ServerFactory,
    tmp_path: Path,
    how: str,
    kill_from_outside: bool,
    expect: tuple[Outcome, float | None, str] = (Outcome.infra_error, None, "failed"),
) -> Trajectory:
    state_dir = tmp_path / "sandboxes"
    settings = {"sandbox": BwrapConfig(state_dir=state_dir)}
    ours: set[str] = set()
    watcher = asyncio.create_task(collect_ids(state_dir, ours))
    async with agentroll_server(registry=fault_registry(), **settings) as (_, client):
        job_id = f"victim-{how}"
        await client.submit([{"job_id": job_id, "handler": VICTIM, "instance": {"strike": how}}])
        if kill_from_outside:
            await kill_sandbox_when_started(client, job_id, state_dir)
        t = (await client.wait_for([job_id], 60))[job_id]
        assert not (await client.status()).jobs_by_state
        watcher.cancel()
        assert ours, "the rollout had a sandbox"
        async with asyncio.timeout(30):
            while sandbox_pids(ours) or leases(state_dir):  # the broken one is torn down too
                await asyncio.sleep(0.05)
    assert (t.outcome, t.reward, t.status) == expect, t.error
    return t


def running(cmdline: bytes) -> bool:
    """Whether a process with exactly this command line runs on the machine."""
    return any(p.cmdline == cmdline for p in procs.scan())


async def collect_ids(state_dir: Path, into: set[str]) -> None:
    """Every sandbox id that appears under `state_dir` (this test's server only)."""
    while True:
        into |= await asyncio.to_thread(lease_ids, state_dir)
        await asyncio.sleep(0.05)


async def kill_sandbox_when_started(
    client: AsyncRolloutClient, job_id: str, state_dir: Path
) -> None:
    async with asyncio.timeout(30):
        await started(job_id).wait()
    await asyncio.sleep(0.3)  # the command is running inside
    (lease,) = [x for x in leases(state_dir) if x["label"] == job_id]
    os.killpg(lease["pgid"], signal.SIGKILL)  # the recorded group; never by name


async def test_sandbox_killed_mid_tool_call(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    t = await strike(agentroll_server, tmp_path, "tool", kill_from_outside=True)
    assert t.error is not None and (t.error.type, t.error.stage) == ("sandbox_failure", "run")


async def test_the_agent_cannot_kill_the_action_server(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """`kill -9 $PPID` from the agent's shell: the policy's doing, never an infra_error."""
    expect = (Outcome.ok, 1.0, "completed")
    t = await strike(agentroll_server, tmp_path, "action_server", False, expect)
    assert t.error is None


async def test_code_grader_loses_its_sandbox_mid_eval(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The built-in `code` handler grades in a sandbox of its own; killed from outside while
    the hidden tests run, it is replaced and the solution graded again: its real score."""
    task = load_code_tasks()[0]
    instance = task.instance()
    slow = "import subprocess; subprocess.run(['sleep', '5.123'])"  # findable by its argv
    instance["tests"] = [*instance["tests"], slow]
    state_dir = tmp_path / "sandboxes"
    async with (
        scripted_backend(wrong_rate=0.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        await client.submit([{"job_id": "graded", "handler": "code", "instance": instance}])
        async with asyncio.timeout(60):  # the agent's sandbox (INIT), then the grader's (EVAL)
            while not (agent := [x["sandbox_id"] for x in leases(state_dir)]):
                await asyncio.sleep(0.05)
            while not (grader := [x for x in leases(state_dir) if x["sandbox_id"] not in agent]):
                await asyncio.sleep(0.05)
            while not running(b"sleep\x005.123\x00"):
                await asyncio.sleep(0.05)  # until the runner is inside the sleeping test
        # Read the lease again: the one first seen may predate the launcher's pid.
        (booted,) = [x for x in leases(state_dir) if x["sandbox_id"] == grader[0]["sandbox_id"]]
        os.killpg(booted["pgid"], signal.SIGKILL)
        t = (await client.wait_for(["graded"], 120))["graded"]
        async with asyncio.timeout(30):
            while sandbox_pids({grader[0]["sandbox_id"]}) or leases(state_dir):
                await asyncio.sleep(0.05)
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), t.error
    assert t.reward_info["passed"] == t.reward_info["total"] == len(instance["tests"])
    assert t.reward_info["grading_attempts"] == 2


async def test_reward_code_crash(agentroll_server: ServerFactory, tmp_path: Path) -> None:
    t = await strike(agentroll_server, tmp_path, "eval_raise", kill_from_outside=False)
    assert t.error is not None and (t.error.type, t.error.stage) == ("eval_exception", "eval")
    assert "ZeroDivisionError: reward code crashed" in t.error.message
