"""A job admitted ends with exactly one result, whatever arrives when; control state persists."""

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, make_registry

from agentroll.server.jobs import JobService, Rollout
from agentroll.server.schema import JobRequest, Outcome
from agentroll.server.state import ServerState
from agentroll.server.store import JobStore, NewJob

pytestmark = pytest.mark.integration


def job(job_id: str, **instance: Any) -> dict[str, Any]:
    return {"job_id": job_id, "handler": "steered", "instance": instance}


def service_of(server: Any) -> JobService:
    svc: JobService = server.server.config.app.state.service
    return svc


def state_of(server: Any) -> ServerState:
    state: ServerState = server.server.config.app.state.server
    return state


async def test_resubmission_with_reordered_keys_is_the_same_job(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (_, client):
        first = job("same", reward=0.5, run_s=0.0, tags={"a": 1, "b": 2})
        reordered = {
            "instance": {"tags": {"b": 2, "a": 1}, "run_s": 0.0, "reward": 0.5},
            "handler": "steered",
            "job_id": "same",
        }
        await client.submit([first])
        again = await client.submit([reordered])  # a retry that serialised its keys differently
        assert [(s.job_id, s.created) for s in again] == [("same", False)]
        result = await client.result("same")
        assert result is not None and result.reward == 0.5


async def test_a_cancel_after_the_pipeline_keeps_the_finished_result(
    agentroll_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between EVAL and the commit (the template check) a cancel arrives: too late to cancel."""
    in_check, release = asyncio.Event(), asyncio.Event()

    async def slow_check(self: Rollout) -> int | None:
        in_check.set()
        await release.wait()
        return None

    monkeypatch.setattr(Rollout, "_template_divergence", slow_check)
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        await client.submit([job("late", reward=1.0)])
        await asyncio.wait_for(in_check.wait(), 10)
        svc = service_of(server)
        cancelled = asyncio.create_task(client.cancel("late"))
        await asyncio.sleep(0.2)
        for live in list(svc.live.values()):
            live.cancel_cause = "server_shutdown"
            assert live.task is not None
            live.task.cancel()  # the harshest form: the task itself is cancelled
        await asyncio.sleep(0.1)
        release.set()
        assert await cancelled == []  # the job had finished: nothing to cancel
        result = await client.result("late", wait=10)
        assert result is not None
        assert (result.outcome, result.reward) == (Outcome.ok, 1.0)
        assert svc.live == {}  # not stranded, not counted against max_live_jobs
        page = await client.results(after=0)
        assert [r.job_id for r in page.results] == ["late"]  # exactly one result


async def test_a_trajectory_that_cannot_be_built_still_ends_the_job(
    agentroll_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Rollout, verdict: Any, extra: Any) -> Any:
        raise ValueError("cannot serialise this rollout")

    monkeypatch.setattr(Rollout, "trajectory", broken)
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        await client.submit([job("broken")])
        result = await client.result("broken", wait=10)
        assert result is not None
        assert (result.outcome, result.reward) == (Outcome.infra_error, None)
        assert result.error is not None and result.error.type == "trajectory_failed"
        assert service_of(server).live == {}


async def test_the_staleness_bound_a_resume_set_survives_a_restart(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=make_registry(Gates()), max_policy_lag=8) as (_, client):
        await client.pause()
        await client.resume(policy_version=2, max_policy_lag=1)
        await client.pause()  # a later pause keeps the bound with the pause state
    async with agentroll_server(registry=make_registry(Gates()), max_policy_lag=8) as (_, client):
        policies = (await client.status()).policies
        assert (policies["default"].paused, policies["default"].max_policy_lag) == (True, 1)
        await client.resume(policy_version=3)  # no new bound: the resumed one stays
        assert (await client.status()).policies["default"].max_policy_lag == 1


async def test_pause_state_and_policy_version_survive_a_restart(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        await client.pause()
        await client.resume(policy_version=3)
        await client.pause(mode="keep")
        await client.submit([job("stamped", block=["init"])])
        row = await state_of(server).store.get_job("stamped")
        assert row is not None and json.loads(row.request_json)["policy_version"] == 3
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        status = await client.status()
        assert (status.paused, status.policy_version) == (True, 3)  # killed mid-sync: paused
        assert state_of(server).policies.default.gate.mode == "keep"
        resumed = await client.resume(policy_version=4)
        assert (resumed.paused, resumed.policy_version) == (False, 4)
    async with agentroll_server(registry=make_registry(Gates())) as (_, client):
        status = await client.status()
        assert (status.paused, status.policy_version) == (False, 4)


async def test_a_job_requeued_too_often_ends_with_requeue_limit(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    store = JobStore(tmp_path / "agentroll.db")
    await store.open()
    request = JobRequest.model_validate(job("crashy"))
    await store.insert_jobs(
        [NewJob("crashy", request.model_dump_json(), "h", "steered", None, 1.0)]
    )
    for _ in range(3):  # started three times, each attempt ended by a dead server
        await store.count_start("crashy")
    await store.close()
    async with agentroll_server(registry=make_registry(Gates()), max_requeues=2) as (_, client):
        result = await client.result("crashy", wait=10)
        assert result is not None
        assert (result.outcome, result.reward) == (Outcome.infra_error, None)
        assert result.error is not None and result.error.type == "requeue_limit"


async def test_a_job_that_never_started_is_requeued_whatever_the_restarts_cost(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Restarts alone spend no requeue: a job left in the queue (no attempt started) by any
    number of dead servers runs even on a server that allows no requeue, and its one attempt
    is counted. (tests/e2e/test_restart.py kills real servers many times over.)"""
    store = JobStore(tmp_path / "agentroll.db")
    await store.open()
    request = JobRequest.model_validate(job("patient"))
    await store.insert_jobs(
        [NewJob("patient", request.model_dump_json(), "h", "steered", None, 1.0)]
    )
    await store.close()
    async with agentroll_server(registry=make_registry(Gates()), max_requeues=0) as (_, client):
        result = await client.result("patient", wait=10)
        assert result is not None and result.outcome == Outcome.ok, result
        assert (await client.job("patient")).attempts == 1


async def test_cancels_at_random_points_leave_exactly_one_result_per_job(
    agentroll_server: ServerFactory,
) -> None:
    """Many jobs with random stage times, each cancelled (or not) at a random moment."""
    rng = random.Random(11)
    jobs = [
        job(
            f"r{i:03d}",
            init_s=rng.choice([0, 0, 0.001, 0.01]),
            run_s=rng.choice([0, 0.002, 0.02]),
            eval_s=rng.choice([0, 0.001, 0.01]),
        )
        for i in range(300)
    ]
    pools = {"init": 8, "run": 8, "eval": 4, "ready_buffer": 8}
    async with agentroll_server(
        registry=make_registry(Gates()), pools=pools, measure_template_divergence=True
    ) as (server, client):
        await client.submit(jobs)

        async def cancel_later(job_id: str) -> None:
            await asyncio.sleep(rng.random() * 0.3)
            await client.cancel(job_id)

        await asyncio.gather(*(cancel_later(j["job_id"]) for j in jobs if rng.random() < 0.7))
        results = []
        cursor = 0
        async with asyncio.timeout(60):
            while len(results) < len(jobs):
                page = await client.results(after=cursor, limit=500, wait=1)
                results += page.results
                cursor = page.next_cursor
        assert service_of(server).live == {}
    ids = [r.job_id for r in results]
    assert sorted(ids) == sorted(j["job_id"] for j in jobs)  # every job, exactly once
    assert [r.cursor for r in results] == list(range(1, len(jobs) + 1))  # gap-free
    outcomes = {r.outcome for r in results}
    assert outcomes <= {Outcome.ok, Outcome.cancelled} and Outcome.cancelled in outcomes
    for r in results:
        assert (r.reward is None) == (r.outcome is Outcome.cancelled)
