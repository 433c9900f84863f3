"""A server SIGKILLed mid-run and restarted on the same database loses nothing."""

import json
import time
from pathlib import Path

import pytest
from tests.integration.faults.support import drain, math_jobs, wait_ready

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome
from agentroll.testing.sandboxes import lease_ids, sandbox_pids

pytestmark = pytest.mark.e2e

JOBS = 200


@pytest.mark.parametrize("on_restart", ["requeue", "infra_error"])
def test_sigkill_mid_run_then_restart_loses_nothing(tmp_path: Path, on_restart: str) -> None:
    db = str(tmp_path / "agentroll.db")
    env = {
        "AGENTROLL_POOLS__RUN": "16",
        "AGENTROLL_POOLS__INIT": "16",
        "AGENTROLL_ON_RESTART": on_restart,
    }
    with agentroll_process(
        ["scripted-llm", "--port", "0", "--latency-s", "0.2"], tmp_path, "llm"
    ) as llm:
        with agentroll_process(
            ["serve", "--port", "0", "--db", db], tmp_path, "server1", env=env
        ) as first:
            client = wait_ready(first.url)
            client.add_backend({"id": "llm", "base_url": llm.url})
            client.submit(math_jobs(JOBS, "j", 4))
            # Few: meanwhile RUN drains the queue, and math grading's worker processes start on
            # the first answer math-verify must judge (seconds on a loaded machine).
            # Admission lets jobs in at its readings, so RUN can be empty for a moment: wait
            # for a moment when some are in it.
            deadline = time.monotonic() + 60
            while True:
                status = client.status()
                states = status.jobs_by_state
                if status.results_cursor >= 10 and states.get("run", 0) > 0:
                    break
                assert time.monotonic() < deadline, states
                time.sleep(0.02)
            before = client.results(after=0, limit=1000).results
            first.kill()  # SIGKILL: no shutdown hook runs
            client.close()
        assert states.get("run", 0) > 0 and states.get("queued", 0) > 0  # died with jobs in flight

        with agentroll_process(
            ["serve", "--port", "0", "--db", db], tmp_path, "server2", env=env
        ) as second:
            client = wait_ready(second.url)
            assert [b.id for b in client.backends()] == ["llm"]  # registrations persisted
            results = drain(client, JOBS)
            views = {jid: client.job(jid) for jid in ("j000", f"j{JOBS - 1:03d}")}
            client.close()

    ids = [r["job_id"] for r in results]
    assert len(ids) == JOBS and len(set(ids)) == JOBS  # every job, exactly once
    assert [r["cursor"] for r in results] == list(range(1, JOBS + 1))  # gap-free cursor
    # what a trainer had already seen is unchanged after the crash
    by_id = {r["job_id"]: r for r in results}
    for old in before:
        assert by_id[old.job_id]["cursor"] == old.cursor
        assert by_id[old.job_id]["response_ids"] == old.response_ids
    interrupted = [r for r in results if r["cursor"] > len(before)]
    if on_restart == "requeue":
        assert {r["outcome"] for r in results} == {Outcome.ok}
        assert views[f"j{JOBS - 1:03d}"].attempts == 2  # it was still queued at the kill
    else:
        failed = [r for r in interrupted if r["outcome"] == Outcome.infra_error]
        assert failed and all(r["error"]["type"] == "server_restart" for r in failed)
        assert all(r["reward"] is None for r in failed)


def test_restart_after_sigkill_leaves_no_sandbox_behind(tmp_path: Path) -> None:
    state_dir = tmp_path / "sandboxes"
    seen: set[str] = set()

    def ours() -> set[int]:
        """Processes of this test's sandboxes only (other runs may share the machine)."""
        seen.update(lease_ids(state_dir))
        return sandbox_pids(seen)

    env = {"AGENTROLL_SANDBOX": json.dumps({"type": "bwrap", "state_dir": str(state_dir)})}
    db = str(tmp_path / "agentroll.db")
    handler = "tests.integration.server.sandbox_handlers:Sleeper"
    jobs = [{"job_id": f"s{i}", "handler": handler, "instance": {}} for i in range(6)]
    with agentroll_process(["serve", "--port", "0", "--db", db], tmp_path, "s1", env=env) as first:
        client = wait_ready(first.url)
        client.submit(jobs)
        deadline = time.monotonic() + 60
        while client.status().jobs_by_state.get("run", 0) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(ours()) >= 6  # live sandbox processes
        assert len(list((state_dir / "leases").iterdir())) >= 6  # one lease per sandbox
        first.kill()
        client.close()
    with agentroll_process(["serve", "--port", "0", "--db", db], tmp_path, "s2", env=env) as second:
        client = wait_ready(second.url)
        assert sorted(client.cancel_where(all=True)) == [j["job_id"] for j in jobs]  # requeued
        deadline = time.monotonic() + 30
        while ours() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ours() == set()
        # the dead server's leases were reaped at start, the new server's at teardown
        assert list((state_dir / "leases").iterdir()) == []
        assert list((state_dir / "sb").iterdir()) == []
        client.close()
