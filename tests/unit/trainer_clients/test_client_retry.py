"""A kept-alive connection the server closed is retried once, only where that is safe."""

import httpx
import pytest

from agentroll.trainer_clients import RolloutClient, ServerUnavailable

STATUS = {
    "accepting": True, "stages": {}, "ready": 0, "jobs_by_state": {}, "backends": [],
    "results_cursor": 0,
}  # fmt: skip


def flaky(failures: int) -> tuple[httpx.MockTransport, list[str]]:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) <= failures:
            raise httpx.ReadError("connection closed by peer", request=request)
        if request.url.path == "/v1/jobs":
            return httpx.Response(200, json={"jobs": []})
        return httpx.Response(200, json=STATUS)

    return httpx.MockTransport(handle), seen


def test_get_is_retried_once() -> None:
    transport, seen = flaky(1)
    with RolloutClient("http://server", transport=transport) as client:
        assert client.status().accepting
    assert seen == ["GET", "GET"]


def test_a_second_failure_is_reported() -> None:
    transport, seen = flaky(2)
    with (
        RolloutClient("http://server", transport=transport) as client,
        pytest.raises(ServerUnavailable),
    ):
        client.status()
    assert seen == ["GET", "GET"]


def test_submission_is_retried_only_when_every_job_names_its_id() -> None:
    named = {"job_id": "a", "handler": "math", "instance": {"question": "1+1", "answer": "2"}}
    transport, seen = flaky(1)
    with RolloutClient("http://server", transport=transport) as client:
        client.submit([named])
    assert seen == ["POST", "POST"]
    anonymous = {k: v for k, v in named.items() if k != "job_id"}
    transport, seen = flaky(1)
    with (
        RolloutClient("http://server", transport=transport) as client,
        pytest.raises(ServerUnavailable),
    ):
        client.submit([anonymous])  # a repeat could admit the jobs twice
    assert seen == ["POST"]
