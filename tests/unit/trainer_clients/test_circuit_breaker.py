"""The circuit breaker: a run of infra_errors stops the collector with their cause instead of
resampling forever; failures with working tries between them never open it (fake servers)."""

import pytest
from tests.unit.trainer_clients.fake_servers import TEMPLATE, collector_over

from agentroll.server.schema import JobRequest, Outcome, Trajectory
from agentroll.server.schema.trajectory import ErrorInfo, Segment
from agentroll.testing.fake_rollout_server import FakeRolloutServer, SimulatedRun
from agentroll.trainer_clients import GroupSpec, InfraCircuitOpen
from agentroll.trainer_clients.breaker import InfraBreaker


def always_infra(request: JobRequest) -> SimulatedRun:
    return SimulatedRun(Outcome.infra_error, None, 1.0)


def every_other_infra(request: JobRequest) -> SimulatedRun:
    """Sample 0 of each group always fails, sample 1 always works."""
    if (request.job_id or "").split("-s")[-1].startswith("0"):
        return SimulatedRun(Outcome.infra_error, None, 1.0)
    return SimulatedRun(Outcome.ok, 1.0, 1.0)


async def test_a_broken_backend_stops_the_collector_with_its_cause() -> None:
    server = FakeRolloutServer(always_infra)
    async with collector_over(
        [server], max_retries=1000, max_consecutive_infra_errors=6
    ) as collector:
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        group = await collector.next_group(timeout_s=30)
        with pytest.raises(InfraCircuitOpen) as raised:
            await collector.next_group(timeout_s=30)
        with pytest.raises(InfraCircuitOpen):  # nothing new is accepted either
            await collector.submit_groups([GroupSpec("h", TEMPLATE, 2)])
    assert group is not None and not group.valid
    assert group.reason is not None and "circuit breaker open" in group.reason
    error = raised.value
    assert error.count == 6 and error.causes == {"infra_error": 6}
    assert "6 infra_errors in a row (infra_error x6; no backend reached)" in str(error)
    assert "'simulated'" in str(error)
    # bounded: the 6 failures plus at most the retries already sent, never 1000 per sample
    assert len(server.submitted) <= 8


async def test_failures_between_working_tries_never_open_it() -> None:
    """The control: as many infra_errors in all, but never two in a row."""
    server = FakeRolloutServer(every_other_infra)
    async with collector_over(
        [server], max_retries=0, oversample=0, max_consecutive_infra_errors=2
    ) as collector:
        specs = [GroupSpec(f"g{i}", TEMPLATE, 2) for i in range(6)]
        groups = await collector.collect(specs, timeout_s=30)
    assert len(groups) == 6 and all(not g.valid for g in groups)  # sample 0 never works
    assert all("circuit breaker" not in (g.reason or "") for g in groups)
    assert collector.stats.dropped["infra_error"] == 6


def finished(outcome: Outcome, cause: str = "llm_backend_unavailable") -> Trajectory:
    failed = outcome is Outcome.infra_error
    return Trajectory(
        job_id=f"j-{outcome.value}",
        handler="sim",
        outcome=outcome,
        status="failed" if failed else "completed",
        reward=None if outcome not in (Outcome.ok, Outcome.agent_error) else 0.0,
        error=ErrorInfo(type=cause, message="backend b1 refused", stage="run") if failed else None,
        response_ids=[1] if failed else [],
        response_mask=[1] if failed else [],
        response_logprobs=[0.0] if failed else [],
        segments=[Segment(start=0, end=1, backend_id="b1", policy_version=0, finish_reason="stop")]
        if failed
        else [],
    )


def test_a_try_that_ran_resets_the_count_and_a_cancelled_one_does_not() -> None:
    breaker = InfraBreaker(3)
    infra = finished(Outcome.infra_error)
    for between in (Outcome.ok, Outcome.agent_error, Outcome.timed_out):
        breaker.note(infra)
        breaker.note(infra)
        breaker.note(finished(between))  # it ran: the backend works
    breaker.note(infra)
    breaker.note(infra)
    breaker.note(finished(Outcome.cancelled))  # says nothing about the backend
    with pytest.raises(InfraCircuitOpen) as raised:
        breaker.note(finished(Outcome.infra_error, cause="sandbox_start_failed"))
    error = raised.value
    assert error.causes == {"llm_backend_unavailable at run": 2, "sandbox_start_failed at run": 1}
    assert error.backends == ["b1"]
    assert "latest llm_backend_unavailable at run: 'backend b1 refused'" in str(error)
    assert "backends b1" in str(error)


def test_the_breaker_can_be_turned_off_and_refuses_a_nonsense_limit() -> None:
    off = InfraBreaker(None)
    for _ in range(1000):
        off.note(finished(Outcome.infra_error))
    with pytest.raises(ValueError, match="max_consecutive_infra_errors"):
        InfraBreaker(0)
