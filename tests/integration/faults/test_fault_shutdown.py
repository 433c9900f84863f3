"""SIGTERM to a server process under load: it stops admitting, lets running rollouts finish
for `shutdown_grace_s`, cancels the rest as `server_shutdown`, persists every job, tears
down every sandbox, and exits."""

import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from tests.integration.faults.fault_handlers import staged_job
from tests.integration.faults.support import stored_jobs, wait_ready, wait_until

from agentroll.server.launch import agentroll_process
from agentroll.testing.sandboxes import lease_ids, leases, sandbox_pids
from agentroll.trainer_clients import ApiError, RolloutClient, ServerUnavailable

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

GRACE_S = 4.0


def refused(client: RolloutClient) -> str:
    """How a submission made during the drain is turned away."""
    try:
        client.submit([staged_job("too-late")])
    except ServerUnavailable:
        return "connection refused"
    except ApiError as exc:
        return str(exc)
    return "admitted"


def test_sigterm_under_load_drains_cancels_and_persists(tmp_path: Path) -> None:
    gate, go = tmp_path / "gate", tmp_path / "go"
    gate.touch()  # never opened: held jobs can only end by the shutdown
    go.touch()  # opened just before SIGTERM: these are mid-RUN when it arrives
    quick = [staged_job(f"quick{i:02d}", hold=["run"], gate=str(go), run_s=2.0) for i in range(40)]
    held = [
        staged_job(f"held{i:03d}", hold=["run"], gate=str(gate), sandbox=i < 8) for i in range(260)
    ]
    state_dir = tmp_path / "sandboxes"
    env = {
        "AGENTROLL_POOLS__RUN": "64",
        "AGENTROLL_POOLS__INIT": "16",
        "AGENTROLL_POOLS__READY_BUFFER": "32",
        "AGENTROLL_ADMISSION__LIVE_WHEN_BUSY": "300",  # a busy RUN pool however busy the node
        "AGENTROLL_SHUTDOWN_GRACE_S": str(GRACE_S),
        "AGENTROLL_SANDBOX": json.dumps({"type": "bwrap", "state_dir": str(state_dir)}),
    }
    db = tmp_path / "agentroll.db"
    with agentroll_process(["serve", "--port", "0", "--db", str(db)], tmp_path, "s", env=env) as s:
        client = wait_ready(s.url)
        client.submit(quick + held)
        wait_until(lambda: client.status().jobs_by_state.get("run", 0) >= 60, 60, "a busy RUN pool")
        wait_until(lambda: len(leases(state_dir)) >= 8, 60, "sandboxes of held jobs")
        assert client.status().results_cursor == 0
        ours = lease_ids(state_dir)
        go.unlink()
        time.sleep(0.3)  # the quick ones are in their last 2 s of RUN
        sent = time.monotonic()
        s.popen.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        turned_away = refused(client)
        try:
            code = s.popen.wait(timeout=GRACE_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not exit after SIGTERM")
        took = time.monotonic() - sent
        client.close()
    assert turned_away in ("connection refused",) or "shutting_down" in turned_away, turned_away
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a clean shutdown
    assert took < GRACE_S + 30  # bounded by the grace, not by the 260 rollouts still held

    jobs = stored_jobs(db)
    assert "too-late" not in jobs
    assert len(jobs) == 300
    by_state = Counter((state, error) for state, error in jobs.values())
    # the running quick rollouts finished inside the grace; everything else was cancelled
    assert by_state == {("completed", None): 40, ("cancelled", "server_shutdown"): 260}
    assert sandbox_pids(ours) == set()
    assert leases(state_dir) == []
