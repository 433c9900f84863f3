"""Admission that fits the node: the rules, on readings the tests choose."""

import asyncio
import time

import pytest

from agentroll.server.admission import (
    SAMPLE_INTERVAL_S,
    AdmissionSettings,
    NodeAdmission,
    NodeReading,
    pressure_between,
    read_node,
)

GiB = 1 << 30


def reading(
    *,
    cpu: float = 10.0,
    available: int = 20 * GiB,
    threads: int = 500,
    cpu_wait_us: int | None = None,
) -> NodeReading:
    return NodeReading(cpu, available, 24 * GiB, threads, 30_000, cpu_wait_us)


def gate(
    node: list[NodeReading], clock: list[float] | None = None, **settings: object
) -> NodeAdmission:
    """Readings from `node`; at the times in `clock` where given, else real ones."""
    now = (lambda: clock[0]) if clock is not None else time.monotonic
    return NodeAdmission(AdmissionSettings(**settings), sample=lambda: node[0], cpus=2, clock=now)


@pytest.mark.parametrize(
    ("node", "starting", "live", "reason"),
    [
        (reading(), 7, 7, None),
        (reading(available=1 * GiB), 0, 0, "memory"),  # under 10 % of 24 GiB available
        (reading(threads=29_000), 0, 0, "pids"),
        (reading(cpu=95.0), 2, 2, "cpu"),  # busy, and one start per CPU already under way
        (reading(cpu=95.0), 1, 1, None),  # busy, but a saturated node still starts a few
        (reading(cpu=95.0), 0, 8, "cpu"),  # busy, and four rollouts per CPU are live
        (reading(), 0, 10, "cpu"),  # not busy, but the limit grows a quarter per reading
    ],
)
def test_what_holds_a_job_back(
    node: NodeReading, starting: int, live: int, reason: str | None
) -> None:
    assert gate([node]).refusal(starting, live) == reason


def test_pressure_is_measured_since_the_previous_reading_not_over_10_s() -> None:
    """Sandboxes started a second ago already show: PSI's running total, not its average."""
    before = reading(cpu=0.0, cpu_wait_us=5_000_000)
    after = reading(cpu=0.0, cpu_wait_us=5_450_000)  # 0.45 s of waiting in 0.5 s
    assert pressure_between(before, after, 0.5) == pytest.approx(90.0)
    assert pressure_between(None, after, 0.5) == 0.0  # no earlier reading: PSI's own figure
    assert pressure_between(reading(cpu=30.0), reading(cpu=40.0), 0.5) == 40.0  # no PSI
    node, clock = [before], [0.0]
    admission = gate(node, clock)
    assert admission.refusal(2, 2) is None and not admission.busy
    node[0], clock[0] = after, SAMPLE_INTERVAL_S
    assert admission.refusal(2, 2) == "cpu" and admission.busy


def test_the_live_limit_shrinks_while_the_node_stays_busy_and_grows_only_when_it_binds() -> None:
    node, clock = [reading()], [0.0]
    admission = gate(node, clock)
    waited_us = [0]

    def next_reading(
        cpu: float, live: int, checks: int = 1, waiting_now: float | None = None
    ) -> int:
        """`cpu`: PSI's 10 s average; `waiting_now`: % of this interval tasks waited."""
        waited_us[0] += int(5_000 * (cpu if waiting_now is None else waiting_now))
        node[0] = reading(cpu=cpu, cpu_wait_us=waited_us[0])
        clock[0] += SAMPLE_INTERVAL_S
        for _ in range(checks):  # the waiting jobs each check; one reading moves it once
            admission.refusal(0, live)
        return admission.live_limit

    assert admission.live_limit == 8  # four per CPU to begin with
    assert next_reading(10.0, 8, checks=5) == 10  # not busy, the limit binds: grows by 1/4
    assert next_reading(10.0, 10) == 12
    assert next_reading(10.0, 3) == 12  # it does not bind: nothing to learn
    # a blip (sandboxes starting): busy now, not over 10 s: no growth, and no shrinking
    assert next_reading(10.0, 12, waiting_now=95.0) == 12 and admission.busy
    assert next_reading(95.0, 12) == 9  # busy for a while: 0.8 of what is live
    assert next_reading(95.0, 9) == 8  # never below the floor
    assert next_reading(95.0, 40) == 8  # even if more are live (admitted before it was busy)


def test_the_floor_is_a_setting() -> None:
    admission = gate([reading(cpu=95.0)], live_when_busy=3)
    assert admission.refusal(0, 2) is None and admission.refusal(0, 3) == "cpu"


async def test_a_job_waits_for_room_and_is_counted_while_it_waits() -> None:
    node = [reading(available=1 * GiB)]
    admission = gate(node)
    waiter = asyncio.create_task(admission.admit(lambda: 0, lambda: 0, lambda: False))
    await asyncio.sleep(0.4)
    assert not waiter.done() and admission.waiting["memory"] == 1
    node[0] = reading()  # memory freed
    await asyncio.wait_for(waiter, 5)
    assert admission.waiting["memory"] == 0


async def test_an_idle_node_admits_whatever_the_readings_say() -> None:
    admission = gate([reading(available=1 * GiB)])
    await asyncio.wait_for(admission.admit(lambda: 0, lambda: 0, lambda: True), 1)


async def test_disabled_admission_never_waits() -> None:
    admission = gate([reading(available=0)], enabled=False)
    await asyncio.wait_for(admission.admit(lambda: 0, lambda: 0, lambda: False), 1)


def test_the_node_reading_comes_from_proc() -> None:
    node = read_node()
    assert 0 < node.memory_available <= node.memory_total
    assert 0 < node.threads < node.threads_max and 0 <= node.cpu_pressure <= 100


async def test_jobs_are_admitted_in_the_order_they_came() -> None:
    """Only the head of the line checks for room: a later job never overtakes (or starves)
    an earlier one, and a job cancelled while it waits gives the turn on."""
    admission = gate([reading(cpu=95.0)], live_when_busy=1)
    live, order = [1], []

    async def job(name: str) -> None:
        await admission.admit(lambda: 0, lambda: live[0], lambda: False)
        order.append(name)
        live[0] += 1

    tasks = {name: asyncio.create_task(job(name)) for name in ("a", "b", "c", "d")}
    await asyncio.sleep(0.3)
    assert order == [] and admission.waiting == {"cpu": 4}
    tasks["b"].cancel()
    for expected in (["a"], ["a", "c"], ["a", "c", "d"]):
        live[0] = 0  # one finished
        async with asyncio.timeout(5):
            while order != expected:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # and no one else got in meanwhile
        assert order == expected
    assert admission.waiting == {}
