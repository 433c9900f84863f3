"""SIGKILL of a server with hundreds of jobs in every state, some in real sandboxes, then a
restart on the same database: nothing finished is lost or repeated, everything in flight is
requeued (or reported `infra_error` / `server_restart`), the dead server's sandboxes are
reaped."""

import json
import shutil
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.faults.fault_handlers import staged_job
from tests.integration.faults.support import drain, wait_ready, wait_until

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.sandboxes import lease_ids, leases, sandbox_pids
from agentroll.trainer_clients.auth import auth_headers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

STATES = ("queued", "init", "ready", "run", "eval")


def workload(gate: Path) -> dict[str, list[dict[str, Any]]]:
    """300 jobs that park, with 8/24/6 workers and a ready buffer of 12, in every state."""
    g = str(gate)
    return {
        "done": [staged_job(f"done{i:03d}") for i in range(100)],
        # 6 hold EVAL workers; 6 finished RUN and wait for one
        "eval": [staged_job(f"eval{i:02d}", hold=["eval"], gate=g) for i in range(12)],
        # 24 hold RUN workers (half with a sandbox); 6 finished INIT and wait: `ready`
        "run": [
            staged_job(f"run{i:02d}", hold=["run"], gate=g, sandbox=i % 2 == 0) for i in range(30)
        ],
        # fill the rest of the ready buffer in INIT (some with a sandbox)
        "init": [
            staged_job(f"init{i:02d}", hold=["init"], gate=g, sandbox=i % 2 == 0) for i in range(20)
        ],
        # no room in the ready buffer: they stay queued
        "queued": [staged_job(f"q{i:03d}") for i in range(138)],
    }


@pytest.mark.parametrize("on_restart", ["requeue", "infra_error"])
def test_sigkill_with_jobs_in_every_state(tmp_path: Path, on_restart: str) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    jobs = workload(gate)
    everything = [j for group in jobs.values() for j in group]
    state_dir = tmp_path / "sandboxes"
    env = {
        "AGENTROLL_POOLS__INIT": "8",
        "AGENTROLL_POOLS__RUN": "24",
        "AGENTROLL_POOLS__EVAL": "6",
        "AGENTROLL_POOLS__READY_BUFFER": "12",
        "AGENTROLL_ADMISSION__LIVE_WHEN_BUSY": "300",  # 62 held jobs live however busy the node
        "AGENTROLL_ON_RESTART": on_restart,
        "AGENTROLL_SANDBOX": json.dumps({"type": "bwrap", "state_dir": str(state_dir)}),
    }
    db = str(tmp_path / "agentroll.db")
    serve = ["serve", "--port", "0", "--db", db]

    with agentroll_process(serve, tmp_path, "first", env=env) as first:
        client = wait_ready(first.url)
        client.submit(everything)

        def parked() -> bool:
            s = client.status()
            return s.results_cursor >= 100 and all(s.jobs_by_state.get(x, 0) for x in STATES)

        wait_until(parked, 120, "jobs parked in every state")
        wait_until(lambda: len(leases(state_dir)) >= 15, 60, "sandboxes of held jobs")
        states = client.status().jobs_by_state
        seen_before = client.results(after=0, limit=1000).results
        ours = lease_ids(state_dir)
        orphans = sandbox_pids(ours)
        first_pid = first.pid
        first.kill()  # SIGKILL: no shutdown hook, no teardown
        client.close()
    assert sum(states.values()) == 200 and states["queued"] >= 100, states
    assert {t.job_id for t in seen_before} >= {j["job_id"] for j in jobs["done"]}
    # its sandboxes' leases, folders and cgroups outlive it (their processes die with it:
    # bwrap --die-with-parent) until a server on the same state directory reaps them
    assert orphans and len(leases(state_dir)) >= 15
    assert all(lease["owner_pid"] == first_pid for lease in leases(state_dir))

    with agentroll_process(serve, tmp_path, "second", env=env) as second:
        client = wait_ready(second.url)
        # reaped at start: every process and lease of the dead server is gone
        wait_until(lambda: not (sandbox_pids() & orphans), 30, "orphans reaped")
        assert not any(lease["owner_pid"] == first_pid for lease in leases(state_dir))
        assert all(lease["owner_pid"] == second.pid for lease in leases(state_dir))
        assert reaped_total(second.url) >= 15
        ours |= lease_ids(state_dir)
        gate.unlink()  # release whatever was requeued
        results = drain(client, len(everything))
        attempts = {j: client.job(j).attempts for j in ("done000", "eval00", "run00", "q137")}
        client.close()
        second.kill(signal.SIGTERM)  # a clean stop tears down what it started
    wait_until(lambda: not sandbox_pids(ours), 30, "every sandbox gone")
    assert leases(state_dir) == []

    check(results, seen_before, attempts, on_restart, len(everything))


def reaped_total(url: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=10, headers=auth_headers(url)).text
    return next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("agentroll_sandboxes_reaped_total")
    )


def check(
    results: list[dict[str, Any]],
    seen_before: list[Trajectory],
    attempts: dict[str, int],
    on_restart: str,
    total: int,
) -> None:
    ids = [r["job_id"] for r in results]
    assert len(ids) == total == len(set(ids))  # each exactly once
    assert [r["cursor"] for r in results] == list(range(1, total + 1))
    by_id = {r["job_id"]: r for r in results}
    for old in seen_before:  # what a trainer already had is unchanged
        assert by_id[old.job_id]["cursor"] == old.cursor
        assert by_id[old.job_id]["outcome"] == old.outcome
    interrupted = [r for r in results if r["job_id"] not in {t.job_id for t in seen_before}]
    outcomes = Counter(r["outcome"] for r in interrupted)
    if on_restart == "requeue":
        assert set(outcomes) == {Outcome.ok}
        assert attempts == {"done000": 1, "eval00": 2, "run00": 2, "q137": 1}  # q137 queued
        sandboxed = [r for r in interrupted if r["job_id"] in ("run00", "run02")]
        assert all(r["reward_info"]["observation"] == "in-sandbox" for r in sandboxed)
    else:
        assert set(outcomes) == {Outcome.infra_error}
        assert all(r["error"]["type"] == "server_restart" for r in interrupted)
        assert all(r["reward"] is None for r in interrupted)
        assert attempts["done000"] == 1
