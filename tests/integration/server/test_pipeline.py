"""The three-stage pipeline through the real HTTP API: states, outcomes, backpressure."""

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry

from agentroll.server.admission import SAMPLE_INTERVAL_S, NodeReading
from agentroll.server.schema import JobState, Outcome
from agentroll.trainer_clients import AsyncRolloutClient
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration


async def eventually(predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def state_of(client: AsyncRolloutClient, job_id: str) -> JobState:
    return (await client.job(job_id)).state


async def test_outcomes_map_failures_without_fake_zero_rewards(
    agentroll_server: ServerFactory,
) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        await client.submit(
            [
                job("ok", reward=0.0),
                job("agent", reward=0.5, fail={"stage": "run", "kind": "agent"}),
                job("infra-init", fail={"stage": "init", "kind": "infra"}),
                job("bug-run", fail={"stage": "run", "kind": "bug"}),
                job("infra-eval", fail={"stage": "eval", "kind": "infra"}),
            ]
        )
        done = await client.wait_for(["ok", "agent", "infra-init", "bug-run", "infra-eval"], 10)
    assert (done["ok"].outcome, done["ok"].reward, done["ok"].status) == (
        Outcome.ok,
        0.0,
        "completed",
    )
    # the policy's fault: still scored by EVAL, reward as given
    assert done["agent"].outcome is Outcome.agent_error and done["agent"].reward == 0.5
    assert done["agent"].error is not None and done["agent"].error.type == "bad_tool_call"
    for name, stage, cause in [
        ("infra-init", "init", "sandbox_lost"),
        ("bug-run", "run", "run_exception"),
        ("infra-eval", "eval", "sandbox_lost"),
    ]:
        t = done[name]
        assert (t.outcome, t.status, t.reward) == (Outcome.infra_error, "failed", None), name
        assert t.error is not None and (t.error.stage, t.error.type) == (stage, cause)
    assert "run" not in gates.entered or "infra-init" not in gates.entered["run"]


async def test_agent_time_is_runs_work_not_the_servers_waits(
    agentroll_server: ServerFactory,
) -> None:
    """`ctx.agent_time()`: the share of the deadline the agent's doing used (the work of RUN
    and EVAL, counted while they go on), never the INIT and queue time the server took.
    Graders size their limits on it, so a server's delay cannot shorten them into a 0."""
    gates = Gates()
    held_s = 2.0
    pools = {"init": 2, "run": 1, "eval": 2, "ready_buffer": 4}
    async with agentroll_server(registry=make_registry(gates), pools=pools) as (_, client):
        timed = job("timed", block=["init"], run_s=0.3, eval_s=0.2)
        await client.submit([job("holder", block=["run"]), timed])
        await eventually(lambda: "holder" in gates.entered["run"])
        await asyncio.sleep(held_s)  # "timed" is held in INIT...
        gates.open["init"].set()
        await eventually(lambda: "init" in gates.agent_time["timed"])
        await asyncio.sleep(held_s)  # ...then waits for the one RUN worker
        gates.open["run"].set()
        done = await client.wait_for(["holder", "timed"], 30)
    assert {t.outcome for t in done.values()} == {Outcome.ok}
    timing = done["timed"].timing
    assert timing.init is not None and timing.init.work_s >= held_s
    assert timing.run is not None and timing.run.queue_s >= held_s
    seen = gates.agent_time["timed"]
    assert seen["init"] == 0.0
    assert seen["run"] >= 0.3 and seen["run"] + 0.2 <= seen["eval"]
    # Read during EVAL, it cannot exceed RUN's and EVAL's whole work (INIT's held seconds or
    # RUN's queue counted in would); a bound on the clock itself would fail a loaded machine.
    assert timing.eval is not None and seen["eval"] <= timing.run.work_s + timing.eval.work_s


async def test_slow_eval_does_not_stop_init_and_run(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    pools = {"init": 2, "run": 2, "eval": 1, "ready_buffer": 4}
    async with agentroll_server(registry=make_registry(gates), pools=pools) as (_, client):
        await client.submit([job(f"j{i}", block=["eval"]) for i in range(8)])
        # With EVAL stuck on its only worker, every job still gets through INIT and RUN.
        await eventually(lambda: len(gates.entered["run"]) == 8)
        status = await client.status()
        assert status.stages["eval"].busy == 1 and status.stages["eval"].queued == 7
        assert status.stages["run"].busy == 0 and status.stages["init"].busy == 0
        gates.open["eval"].set()
        results = await client.wait_for([f"j{i}" for i in range(8)], 10)
    assert all(t.outcome is Outcome.ok for t in results.values())


async def test_ready_buffer_applies_backpressure_to_init(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    pools = {"init": 8, "run": 1, "eval": 4, "ready_buffer": 3}
    async with agentroll_server(registry=make_registry(gates), pools=pools) as (_, client):
        await client.submit([job(f"j{i}", block=["run"]) for i in range(10)])
        await eventually(lambda: len(gates.entered["run"]) == 1)
        await eventually(lambda: len(gates.entered["init"]) == 4)
        await asyncio.sleep(0.2)
        # One job runs; only `ready_buffer` more were initialised, despite 8 init workers.
        assert len(gates.entered["init"]) == 4
        status = await client.status()
        assert status.ready == 3 and status.stages["init"].queued == 6
        gates.open["run"].set()
        results = await client.wait_for([f"j{i}" for i in range(10)], 10)
    assert {t.outcome for t in results.values()} == {Outcome.ok}
    timing = results["j9"].timing
    assert timing.init is not None and timing.init.queue_s > 0  # waited for buffer space


async def test_pool_resize_under_load_drops_nothing(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    pools = {"init": 4, "run": 1, "eval": 4, "ready_buffer": 20}
    async with agentroll_server(registry=make_registry(gates), pools=pools) as (_, client):
        ids = [f"j{i}" for i in range(12)]
        await client.submit([job(i, block=["run"]) for i in ids])
        await eventually(lambda: len(gates.entered["run"]) == 1)
        sizes = await client.resize_pools(run=5)
        assert sizes.run == 5
        await eventually(lambda: len(gates.entered["run"]) == 5)
        assert (await client.status()).stages["run"].busy == 5
        await client.resize_pools(run=2)  # shrink while 5 hold workers: nobody is evicted
        assert (await client.status()).stages["run"].busy == 5
        gates.open["run"].set()
        results = await client.wait_for(ids, 10)
        assert (await client.status()).stages["run"].capacity == 2
    assert len(results) == 12 and {t.outcome for t in results.values()} == {Outcome.ok}


@pytest.mark.parametrize("stage", ["queued", "init", "ready", "run", "eval"])
async def test_cancel_reaches_a_job_in_every_state(
    agentroll_server: ServerFactory, stage: str
) -> None:
    gates = Gates()
    pools = {"init": 1, "run": 1, "eval": 1, "ready_buffer": 4}
    async with agentroll_server(registry=make_registry(gates), pools=pools) as (_, client):
        # `blocker` occupies the stage's only worker where the target must wait behind it.
        plan = {
            "queued": (job("blocker", block=["init"]), job("target")),
            "init": (None, job("target", block=["init"])),
            "ready": (job("blocker", block=["run"]), job("target")),
            "run": (None, job("target", block=["run"])),
            "eval": (None, job("target", block=["eval"])),
        }[stage]
        blocker, target = plan
        if blocker is not None:
            await client.submit([blocker])
            await eventually(lambda: len(gates.entered["init"]) == 1)
        await client.submit([target])
        expected = JobState(stage)
        async with asyncio.timeout(10):
            while await state_of(client, "target") is not expected:
                await asyncio.sleep(0.01)
        assert await client.cancel("target") == ["target"]
        result = await client.result("target")
        assert result is not None
        assert (result.outcome, result.status, result.reward) == (
            Outcome.cancelled,
            "cancelled",
            None,
        )
        assert result.error is not None and result.error.type == "cancelled_by_client"
        assert await client.cancel("target") == []  # already finished: nothing to cancel
        if stage in ("init", "run", "eval"):
            assert f"target:{stage}" in gates.cleaned  # the handler saw the cancellation
        for gate in ("init", "run", "eval"):
            gates.open[gate].set()


async def test_cancel_by_group_and_all(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        await client.submit([job(f"a{i}", "A", block=["run"]) for i in range(3)])
        await client.submit([job(f"b{i}", "B", block=["run"]) for i in range(2)])
        await eventually(lambda: len(gates.entered["run"]) == 5)
        assert sorted(await client.cancel_where(group_id="A")) == ["a0", "a1", "a2"]
        assert (await client.job("b0")).state is JobState.run
        assert sorted(await client.cancel_where(all=True)) == ["b0", "b1"]
        assert (await client.status()).jobs_by_state == {}


async def test_stage_timeout_and_deadline_end_timed_out(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        await client.submit(
            [
                {**job("slow-run", run_s=5), "limits": {"run_timeout_s": 0.2}},
                {**job("late", block=["init"]), "limits": {"deadline_s": 0.3}},
            ]
        )
        done = await client.wait_for(["slow-run", "late"], 10)
    slow, late = done["slow-run"], done["late"]
    assert (slow.outcome, slow.status, slow.reward) == (Outcome.timed_out, "timed_out", None)
    assert slow.error is not None and (slow.error.type, slow.error.stage) == ("run_timeout", "run")
    assert late.outcome is Outcome.timed_out
    assert late.error is not None and late.error.type == "deadline_exceeded"
    assert late.timing.run is None  # never reached RUN


async def test_jobs_wait_for_the_node_and_say_why(agentroll_server: ServerFactory) -> None:
    """A node short of memory holds new jobs back before INIT (queueing, never failing them);
    `/v1/status` and `/metrics` say why; they start once memory is back."""
    gates = Gates()
    gib = 1 << 30
    node = [NodeReading(10.0, gib // 2, 24 * gib, 500, 30_000)]  # 0.5 of 24 GiB available
    async with agentroll_server(registry=make_registry(gates), admission={}) as (server, client):
        state = server.server.config.app.state.server
        state.admission._sample = lambda: node[0]
        await asyncio.sleep(SAMPLE_INTERVAL_S)  # readings are at most this old
        await client.submit([job("first", block=["run"])])  # an idle node admits one anyway
        await eventually(lambda: "first" in gates.entered["run"])
        await client.submit([job(f"held-{i}") for i in range(3)])
        async with asyncio.timeout(10):
            while (await client.status()).admission.waiting.get("memory") != 3:
                await asyncio.sleep(0.05)
        seen_waiting = time.monotonic()
        status = await client.status()
        assert status.stages["init"].queued == 3 and status.stages["init"].busy == 0
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            metrics = (await http.get("/metrics")).text
        assert 'agentroll_admission_waiting{reason="memory"} 3.0' in metrics
        waited = time.monotonic() - seen_waiting  # they queued at least this long
        node[0] = NodeReading(10.0, 20 * gib, 24 * gib, 500, 30_000)
        gates.open["run"].set()
        done = await client.wait_for(["first", "held-0", "held-1", "held-2"], 30)
    assert {t.outcome for t in done.values()} == {Outcome.ok}
    assert all(done[f"held-{i}"].timing.init.queue_s >= waited > 0 for i in range(3))


async def test_a_busy_node_keeps_its_live_rollouts_at_its_measured_capacity(
    agentroll_server: ServerFactory,
) -> None:
    """Under CPU pressure new jobs queue once the live limit is reached (more would only share
    the same CPUs more thinly); none fails, and they start as live ones finish."""
    gates = Gates()
    busy = NodeReading(95.0, 20 << 30, 24 << 30, 500, 30_000)
    admission = {"live_when_busy": 3, "starts_when_busy": 10}
    async with agentroll_server(registry=make_registry(gates), admission=admission) as (
        server,
        client,
    ):
        state = server.server.config.app.state.server
        state.admission._sample = lambda: busy
        await asyncio.sleep(SAMPLE_INTERVAL_S)  # readings are at most this old
        await client.submit([job(f"j-{i}", block=["run"]) for i in range(7)])
        async with asyncio.timeout(10):
            while (await client.status()).admission.waiting.get("cpu") != 4:
                await asyncio.sleep(0.05)
        seen_waiting = time.monotonic()
        status = await client.status()
        assert (status.admission.live, status.admission.live_limit) == (3, 3)
        assert status.stages["run"].busy == 3 and status.admission.cpu_pressure == 95.0
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            metrics = (await http.get("/metrics")).text
        assert "agentroll_admission_live 3.0" in metrics
        assert "agentroll_admission_live_limit 3.0" in metrics
        declared = [line.split()[2] for line in metrics.splitlines() if line.startswith("# TYPE")]
        assert len(declared) == len(set(declared))  # a name declared twice fails the scrape
        waited = time.monotonic() - seen_waiting  # four queued at least this long
        gates.open["run"].set()
        done = await client.wait_for([f"j-{i}" for i in range(7)], 30)
        assert (await client.status()).admission.live == 0
    assert {t.outcome for t in done.values()} == {Outcome.ok}
    assert sum(t.timing.init.queue_s >= waited > 0 for t in done.values()) >= 4
