"""The control cache: one run per task content however many failures wait for it, a bound
on what it keeps, and nothing kept from a control that could not run."""

import asyncio

import pytest

from agentroll.handlers.builtin.control import ControlCache, ControlResult, blamed, content_key
from agentroll.handlers.errors import InfraError

PASSED = ControlResult(True, "judged Score: 10/10")
FAILED = ControlResult(False, "unparseable too: 'garbage'")


async def test_concurrent_failures_of_one_task_share_one_control_run() -> None:
    cache, started, release = ControlCache(), asyncio.Event(), asyncio.Event()

    async def run() -> ControlResult:
        started.set()
        await release.wait()
        return PASSED

    waiters = [asyncio.create_task(cache.result("task", run)) for _ in range(5)]
    await asyncio.wait_for(started.wait(), 10)
    release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 10) == [PASSED] * 5
    assert cache.runs == 1
    assert await cache.result("task", run) == PASSED and cache.runs == 1  # cached


async def test_a_waiter_cancelled_does_not_cancel_the_run_the_others_wait_for() -> None:
    cache, release = ControlCache(), asyncio.Event()

    async def run() -> ControlResult:
        await release.wait()
        return PASSED

    owner = asyncio.create_task(cache.result("task", run))
    await asyncio.sleep(0)
    impatient = asyncio.create_task(cache.result("task", run))
    patient = asyncio.create_task(cache.result("task", run))
    await asyncio.sleep(0)
    impatient.cancel()
    release.set()
    assert await asyncio.wait_for(patient, 10) == PASSED
    assert await owner == PASSED
    with pytest.raises(asyncio.CancelledError):
        await impatient


async def test_a_control_that_could_not_run_is_not_kept_and_its_waiters_hear_why() -> None:
    cache, started, release = ControlCache(), asyncio.Event(), asyncio.Event()

    async def broken() -> ControlResult:
        started.set()
        await release.wait()
        raise InfraError("sandbox did not start")

    owner = asyncio.create_task(cache.result("task", broken))
    await asyncio.wait_for(started.wait(), 10)
    waiter = asyncio.create_task(cache.result("task", broken))
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(InfraError, match="sandbox did not start"):
        await owner
    with pytest.raises(InfraError, match="the control could not run"):
        await waiter

    async def works() -> ControlResult:
        return FAILED

    assert await cache.result("task", works) == FAILED  # tried again, then kept
    assert cache.runs == 2


async def test_the_cache_keeps_at_most_its_bound_dropping_the_least_recently_used() -> None:
    cache = ControlCache(max_entries=2)

    async def run() -> ControlResult:
        return PASSED

    for key in ("a", "b", "a", "c"):  # "a" used again: "b" is the oldest when "c" comes
        await cache.result(key, run)
    assert cache.runs == 3
    await cache.result("a", run)
    assert cache.runs == 3
    await cache.result("b", run)
    assert cache.runs == 4


def test_the_key_names_content_not_identity() -> None:
    assert content_key("judge", "Q", {"a": 1, "b": 2}) == content_key(
        "judge", "Q", {"b": 2, "a": 1}
    )
    assert content_key("judge", "Q", None) != content_key("judge", "Q ", None)
    assert content_key("judge", "Q") != content_key("remote_verify", "Q")


def test_blame_is_a_zero_with_the_reason_only_when_the_control_passed() -> None:
    failure = InfraError("reply has no score", cause="judge_unparseable")
    reward = blamed(failure, "judge_unparseable", PASSED, {"predicted": "x"})
    assert reward.value == 0.0
    assert reward.info == {
        "predicted": "x",
        "reason": "judge_unparseable",
        "failure": "reply has no score",
        "failure_cause": "judge_unparseable",
        "control": {"passed": True, "detail": "judged Score: 10/10"},
    }
    with pytest.raises(InfraError, match=r"control answer too.*garbage") as raised:
        blamed(failure, "judge_unparseable", FAILED, {})
    assert raised.value.cause == "judge_unparseable"


async def test_a_result_not_to_keep_answers_its_waiters_and_the_next_failure_runs_again() -> None:
    cache = ControlCache()
    release = asyncio.Event()

    async def busy() -> ControlResult:
        await release.wait()
        return ControlResult(False, "the grader did not answer in time", keep=False)

    waiters = [asyncio.ensure_future(cache.result("k", busy)) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    answers = await asyncio.wait_for(asyncio.gather(*waiters), 30)
    assert [a.detail for a in answers] == ["the grader did not answer in time"] * 3
    assert cache.runs == 1
    again = await cache.result("k", lambda: asyncio.sleep(0, ControlResult(True, "judged")))
    assert (again.passed, cache.runs) == (True, 2)
