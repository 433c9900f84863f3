"""A server SIGKILLed mid-run and restarted on the same database loses nothing."""

import json
import time
from pathlib import Path

import pytest
from tests.integration.faults.support import drain, math_jobs, wait_ready

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome
from agentroll.testing.sandboxes import lease_ids, sandbox_pids
from agentroll.trainer_clients import ServerUnavailable

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
        assert views[f"j{JOBS - 1:03d}"].attempts == 1  # queued at the kill: one start, after
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


QUEUE_JOBS = 400
KILLS = 10
MAX_REQUEUES = 2
IN_FLIGHT = 32  # INIT + RUN workers: the most jobs a SIGKILL can interrupt at once


def test_many_sigkills_spend_no_requeue_of_a_job_that_never_started(tmp_path: Path) -> None:
    """Far more SIGKILLs than `max_requeues`, each while most of the batch still waits in the
    queue: only attempts that started count. Every job ends once; one whose every attempt a
    SIGKILL cut short may end `requeue_limit`, never one that waited in the queue."""
    db = str(tmp_path / "agentroll.db")
    env = {
        "AGENTROLL_POOLS__RUN": "16",
        "AGENTROLL_POOLS__INIT": "16",
        "AGENTROLL_MAX_REQUEUES": str(MAX_REQUEUES),
    }
    queued_at_kill: list[int] = []
    with agentroll_process(
        ["scripted-llm", "--port", "0", "--latency-s", "0.2"], tmp_path, "llm"
    ) as llm:
        for life in range(KILLS + 1):
            with agentroll_process(
                ["serve", "--port", "0", "--db", db], tmp_path, f"server{life}", env=env
            ) as server:
                client = wait_ready(server.url)
                if life == 0:
                    client.add_backend({"id": "llm", "base_url": llm.url})
                    client.submit(math_jobs(QUEUE_JOBS, "q", 4))
                if life == KILLS:
                    results = drain(client, QUEUE_JOBS, timeout_s=300)
                    limited = [r["job_id"] for r in results if r["outcome"] == Outcome.infra_error]
                    views = {j: client.job(j) for j in [*limited, f"q{QUEUE_JOBS - 1:03d}"]}
                    client.close()
                    break
                # A few results in each life, then SIGKILL with jobs running and queued.
                start, deadline = client.status().results_cursor, time.monotonic() + 60
                while True:
                    status = client.status()
                    if status.results_cursor >= start + 10 and status.jobs_by_state.get("run"):
                        break
                    if status.results_cursor == QUEUE_JOBS:  # nothing left (or all failed)
                        break
                    assert time.monotonic() < deadline, status.jobs_by_state
                    time.sleep(0.02)
                queued_at_kill.append(status.jobs_by_state.get("queued", 0))
                server.kill()
                client.close()

    ids = [r["job_id"] for r in results]
    assert len(ids) == QUEUE_JOBS == len(set(ids))  # every job, exactly once
    assert [r["cursor"] for r in results] == list(range(1, QUEUE_JOBS + 1))
    # Only jobs whose every attempt started and was cut short, far fewer than one SIGKILL
    # can interrupt at once (restarts counted alone failed most of the batch here).
    assert len(limited) < IN_FLIGHT, limited
    for r in results:
        if r["job_id"] in limited:
            assert r["error"]["type"] == "requeue_limit", r["error"]
            assert views[r["job_id"]].attempts == MAX_REQUEUES + 1
        else:
            assert r["outcome"] == Outcome.ok and r["reward"] is not None
    # Restarts alone would have spent every queued job's requeues many times over.
    assert len(queued_at_kill) == KILLS > MAX_REQUEUES + 1
    assert queued_at_kill[MAX_REQUEUES + 1] > 0, queued_at_kill
    # The last job waited through every restart: it started once, when its turn came.
    assert views[f"q{QUEUE_JOBS - 1:03d}"].attempts == 1


def test_a_job_that_kills_its_server_is_stopped_after_the_limit(tmp_path: Path) -> None:
    """The other side: a job whose every attempt kills its server starts `max_requeues` + 1
    times, then ends `infra_error`/`requeue_limit` (alone: a job in flight beside it when the
    server dies spends an attempt too), and the server that outlives it serves on."""
    db = str(tmp_path / "agentroll.db")
    env = {"AGENTROLL_MAX_REQUEUES": str(MAX_REQUEUES)}
    killer = {"job_id": "killer", "handler": "tests.e2e.restart_handlers:ServerKiller"}
    jobs = [{**killer, "instance": {}}]
    deaths = 0
    with agentroll_process(
        ["scripted-llm", "--port", "0", "--latency-s", "0.05"], tmp_path, "llm"
    ) as llm:
        for life in range(MAX_REQUEUES + 3):
            with agentroll_process(
                ["serve", "--port", "0", "--db", db], tmp_path, f"server{life}", env=env
            ) as server:
                client = wait_ready(server.url)
                if life == 0:
                    client.add_backend({"id": "llm", "base_url": llm.url})
                    client.submit(jobs)
                deadline = time.monotonic() + 120
                while server.popen.poll() is None and time.monotonic() < deadline:
                    try:
                        if client.status().results_cursor == len(jobs):
                            break
                    except ServerUnavailable:  # dying right now
                        pass
                    time.sleep(0.05)
                if server.popen.poll() is not None:
                    deaths += 1
                    client.close()
                    continue
                results = drain(client, len(jobs))
                attempts = client.job("killer").attempts
                client.submit(math_jobs(4, "after", 4))
                served = drain(client, len(jobs) + 4)
                client.close()
                break
    assert deaths == MAX_REQUEUES + 1  # started once, requeued twice, each start killed it
    by_id = {r["job_id"]: r for r in results}
    assert len(results) == len(jobs) == len(by_id)
    assert by_id["killer"]["outcome"] == Outcome.infra_error
    assert by_id["killer"]["error"]["type"] == "requeue_limit" and attempts == MAX_REQUEUES + 1
    assert [r["outcome"] for r in served[1:]] == [Outcome.ok] * 4
