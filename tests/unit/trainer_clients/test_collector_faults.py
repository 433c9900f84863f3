"""The collector and the pool never stall silently: each fault either is retried until it
passes or surfaces as an error naming the server and the cause (fake servers, virtual time)."""

import asyncio

import httpx
import pytest
from tests.unit.trainer_clients.fake_servers import TEMPLATE, answer, collector_over, fates

from agentroll.testing.fake_rollout_server import FakeRolloutServer
from agentroll.trainer_clients import FeedError, GroupSpec, InvalidRequest, ServerUnavailable


def refusing_resubmissions(status: int, times: int) -> tuple[FakeRolloutServer, list[str]]:
    """A server on which g-s0-r0 fails to infra, and whose first `times` submissions of its
    retry g-s0-r1 are answered `status`."""
    server = FakeRolloutServer(fates(infra=("g-s0-r0",)))
    refused: list[str] = []

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        retry = request.url.path == "/v1/jobs" and b"g-s0-r1" in request.content
        if retry and len(refused) < times:
            refused.append("g-s0-r1")
            return answer(status)
        return None

    server.intercept = intercept
    return server, refused


@pytest.mark.parametrize("status", [409, 400])
async def test_a_refused_resubmission_makes_its_group_invalid_and_the_pump_goes_on(
    status: int,
) -> None:
    server, _ = refusing_resubmissions(status, times=99)
    async with collector_over([server]) as collector:
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        first = await collector.next_group(timeout_s=30)
        await collector.submit_groups([GroupSpec("h", TEMPLATE, 2)])  # still served
        second = await collector.next_group(timeout_s=30)
    assert first is not None and not first.valid
    assert first.reason is not None and "resubmission refused" in first.reason
    assert f"{server.url}: {status}" in first.reason  # names the server and its answer
    assert second is not None and second.valid and second.group_id == "h"


async def test_a_busy_server_429_is_waited_out() -> None:
    server, refused = refusing_resubmissions(429, times=2)
    async with collector_over([server], max_backoff_s=0.05) as collector:
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        group = await collector.next_group(timeout_s=30)
    assert refused == ["g-s0-r1", "g-s0-r1"]
    assert group is not None and group.valid
    assert [t.job_id for t in group.trajectories] == ["g-s0-r1", "g-s1-r0"]


async def test_a_refused_submission_leaves_no_phantom_group() -> None:
    server = FakeRolloutServer(fates())
    refusals = [answer(400)]

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        return refusals.pop() if request.url.path == "/v1/jobs" and refusals else None

    server.intercept = intercept
    async with collector_over([server]) as collector:
        with pytest.raises(InvalidRequest):
            await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        assert collector.pending == 0 and not collector.has_more()
        assert collector.stats.groups_submitted == 0
        # the id was never used: the trainer may send the group again
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        group = await collector.next_group(timeout_s=30)
    assert group is not None and group.valid


async def test_a_group_id_is_refused_a_second_time_in_one_run() -> None:
    server = FakeRolloutServer(fates())
    async with collector_over([server]) as collector:
        await collector.collect([GroupSpec("g", TEMPLATE, 2)], timeout_s=30)
        with pytest.raises(ValueError, match="already used by this collector"):
            await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        with pytest.raises(ValueError, match="already used"):
            await collector.submit_groups([GroupSpec("x", TEMPLATE, 2)] * 2)
    assert server.submitted == ["g-s0-r0", "g-s1-r0"]  # nothing replayed


async def test_an_unreadable_results_feed_is_raised_from_next_group_naming_the_server() -> None:
    server = FakeRolloutServer(fates())
    bad_page = {"results": [{"job_id": 7}], "next_cursor": 1}

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        return answer(200, bad_page) if request.url.path == "/v1/results" else None

    server.intercept = intercept
    async with collector_over([server], pool={"max_feed_errors": 3}) as collector:
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        with pytest.raises(FeedError, match=f"results feed of {server.url} failed 3 times"):
            while True:  # the invalid group comes first, then the cause
                group = await collector.next_group(timeout_s=30)
                assert group is not None and not group.valid
                assert "collector stopped" in (group.reason or "")


async def test_non_json_health_answers_do_not_end_the_health_checks() -> None:
    server = FakeRolloutServer(fates())
    pages = [answer(200, text="<html>proxy error</html>")] * 3

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/v1/status" and pages and server.submitted:
            return pages.pop()
        return None

    server.intercept = intercept
    async with collector_over([server]) as collector:
        assert collector.pool is not None
        await collector.collect([GroupSpec("g", TEMPLATE, 1)], timeout_s=30)
        server.capacity = 7
        for _ in range(400):  # the checks go on and read the new capacity
            if collector.pool.members[0].capacity == 7:
                break
            await asyncio.sleep(0.01)
        assert not pages and collector.pool.members[0].capacity == 7


async def test_a_stall_or_503_shorter_than_dead_after_s_does_not_fail_over() -> None:
    stalled, spare = FakeRolloutServer(fates()), FakeRolloutServer(fates(), url="http://fake-1")
    release = asyncio.Event()
    outages: list[str] = []

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        if not stalled.submitted or release.is_set():
            return None
        if request.url.path == "/v1/status" and len(outages) % 2:
            outages.append("503")
            return answer(503)
        outages.append("stall")
        await release.wait()  # longer than a health check's own timeout
        return None

    stalled.intercept = intercept
    async with collector_over([stalled, spare], pool={"dead_after_s": 60}) as collector:
        assert collector.pool is not None
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        for _ in range(1000):
            if "503" in outages and outages.count("stall") >= 3:
                break
            await asyncio.sleep(0.01)
        release.set()
        group = await collector.next_group(timeout_s=30)
        failovers = list(collector.pool.failovers)
    assert group is not None and group.valid
    assert failovers == [] and spare.submitted == []  # ran once, where it was placed


async def test_a_server_dead_for_good_fails_over_and_its_jobs_are_cancelled_when_it_returns() -> (
    None
):
    dying, spare = FakeRolloutServer(fates()), FakeRolloutServer(fates(), url="http://fake-1")
    down = asyncio.Event()

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        if down.is_set():
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/v1/results":  # holds its jobs: they never finish here
            await asyncio.sleep(0.01)
            return answer(200, {"results": [], "next_cursor": 0})
        return None

    dying.intercept = intercept
    async with collector_over([dying, spare], pool={"dead_after_s": 0.3}) as collector:
        assert collector.pool is not None
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        assert dying.submitted == ["g-s0-r0", "g-s1-r0"]
        down.set()
        group = await collector.next_group(timeout_s=30)
        assert group is not None and group.valid
        assert spare.submitted == ["g-s0-r0", "g-s1-r0"]
        down.clear()  # it answers again: the copies there are cancelled, it rejoins
        for _ in range(500):
            if dying.cancelled and collector.pool.members[0].alive:
                break
            await asyncio.sleep(0.01)
        failovers = [f.url for f in collector.pool.failovers]
    assert failovers == [dying.url]
    assert sorted(dying.cancelled) == ["g-s0-r0", "g-s1-r0"]
    assert collector.pool.members[0].alive


async def test_an_unconfirmed_submit_runs_elsewhere_and_is_cancelled_where_it_may_have_landed() -> (
    None
):
    flaky, spare = FakeRolloutServer(fates()), FakeRolloutServer(fates(), url="http://fake-1")
    cancels: list[bytes] = []

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/v1/jobs":  # the answer is lost: created there or not?
            raise httpx.ReadTimeout("no answer", request=request)
        if request.url.path == "/v1/jobs/cancel":
            cancels.append(request.content)
        return None

    flaky.intercept = intercept
    async with collector_over([flaky, spare]) as collector:
        await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        group = await collector.next_group(timeout_s=30)
        for _ in range(500):  # the next health check of the flaky server sends the cancel
            if cancels:
                break
            await asyncio.sleep(0.01)
    assert group is not None and group.valid
    assert spare.submitted == ["g-s0-r0", "g-s1-r0"]
    assert cancels and b"g-s0-r0" in cancels[0] and b"g-s1-r0" in cancels[0]


async def test_a_submit_no_server_confirms_is_raised_and_keeps_nothing() -> None:
    servers = [FakeRolloutServer(fates(), url=f"http://fake-{i}") for i in range(2)]

    async def intercept(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/v1/jobs":
            raise httpx.ConnectError("refused", request=request)
        return None

    for server in servers:
        server.intercept = intercept
    async with collector_over(servers) as collector:
        with pytest.raises(ServerUnavailable, match="unconfirmed"):
            await collector.submit_groups([GroupSpec("g", TEMPLATE, 2)])
        assert collector.pending == 0 and not collector.has_more()
