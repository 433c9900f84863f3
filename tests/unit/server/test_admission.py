"""Admission that fits the node: the rules, on readings the tests choose."""

import asyncio

import pytest

from agentroll.server.admission import AdmissionSettings, NodeAdmission, NodeReading, read_node

GiB = 1 << 30


def reading(*, cpu: float = 10.0, available: int = 20 * GiB, threads: int = 500) -> NodeReading:
    return NodeReading(cpu, available, 24 * GiB, threads, 30_000)


def gate(node: list[NodeReading], **settings: object) -> NodeAdmission:
    return NodeAdmission(AdmissionSettings(**settings), sample=lambda: node[0], cpus=2)


@pytest.mark.parametrize(
    ("node", "starting", "reason"),
    [
        (reading(), 50, None),
        (reading(available=1 * GiB), 0, "memory"),  # under 10 % of 24 GiB available
        (reading(threads=29_000), 0, "pids"),
        (reading(cpu=95.0), 2, "cpu"),  # busy, and one start per CPU already under way
        (reading(cpu=95.0), 1, None),  # busy, but a saturated node still starts a few
    ],
)
def test_what_holds_a_job_back(node: NodeReading, starting: int, reason: str | None) -> None:
    assert gate([node]).refusal(starting) == reason


async def test_a_job_waits_for_room_and_is_counted_while_it_waits() -> None:
    node = [reading(available=1 * GiB)]
    admission = gate(node)
    waiter = asyncio.create_task(admission.admit(lambda: 0, lambda: False))
    await asyncio.sleep(0.4)
    assert not waiter.done() and admission.waiting["memory"] == 1
    node[0] = reading()  # memory freed
    await asyncio.wait_for(waiter, 5)
    assert admission.waiting["memory"] == 0


async def test_an_idle_node_admits_whatever_the_readings_say() -> None:
    admission = gate([reading(available=1 * GiB)])
    await asyncio.wait_for(admission.admit(lambda: 0, lambda: True), 1)


async def test_disabled_admission_never_waits() -> None:
    admission = gate([reading(available=0)], enabled=False)
    await asyncio.wait_for(admission.admit(lambda: 0, lambda: False), 1)


def test_the_node_reading_comes_from_proc() -> None:
    node = read_node()
    assert 0 < node.memory_available <= node.memory_total
    assert 0 < node.threads < node.threads_max and 0 <= node.cpu_pressure <= 100
