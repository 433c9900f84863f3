"""The resources-server client against the fake on a real socket: the cookie round trip, the
fake's own refusals (a test double that accepted anything would prove nothing), and every
way a server fails becoming `VerifierFailure` with its cause, within the time limit."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from agentroll.handlers.builtin.remote_verify.resources_client import (
    VerifierFailure,
    encoded,
    verify_remotely,
)
from agentroll.handlers.builtin.remote_verify.responses_output import response_object
from agentroll.server.serving import bind, start_in_loop, url_of
from agentroll.testing.fake_resources_server import COOKIE, FakeResourcesServer, create_app

pytestmark = pytest.mark.integration


@asynccontextmanager
async def fake_server(**options: Any) -> AsyncIterator[tuple[str, FakeResourcesServer]]:
    fake = FakeResourcesServer(**options)
    server = await start_in_loop(create_app(fake))
    try:
        yield server.url, fake
    finally:
        await server.stop()


def row(fake: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"responses_create_params": {"input": "6*7?"}, "expected_answer": "42"}
    if fake is not None:
        out["fake"] = fake
    return out


def verify_body(r: dict[str, Any], answer: str) -> bytes:
    return encoded({**r, "response": response_object([], None, answer, "policy")})


async def test_a_session_is_seeded_verified_in_and_closed() -> None:
    async with fake_server() as (url, fake):
        right = await verify_remotely(url, row(), verify_body(row(), "42"), timeout_s=10)
        wrong = await verify_remotely(url, row(), verify_body(row(), "41"), timeout_s=10)
    assert (right.answer["reward"], wrong.answer["reward"]) == (1.0, 0.0)
    assert right.answer["extracted_answer"] == "42"
    assert right.session == wrong.session == "closed"
    assert [(s["verified"], s["closed"]) for s in fake.log()["sessions"]] == [(True, True)] * 2
    assert fake.refused == []


async def test_a_server_without_close_session_is_not_a_failure() -> None:
    async with fake_server(close_route=False) as (url, _):
        done = await verify_remotely(url, row(), verify_body(row(), "42"), timeout_s=10)
    assert (done.answer["reward"], done.session) == (1.0, "not_supported")


async def test_the_fake_refuses_verify_without_a_valid_cookie() -> None:
    async with fake_server() as (url, fake), httpx.AsyncClient(base_url=url) as http:
        seeded = await http.post("/seed_session", json=row())
        cookie = seeded.cookies[COOKIE]
        session_id, _, mac = cookie.partition(".")
        body = {**row(), "response": response_object([], None, "42", "m")}
        http.cookies.clear()
        missing = await http.post("/verify", json=body)
        forged = await http.post(
            "/verify", json=body, headers={"Cookie": f"{COOKIE}={session_id}.{'0' * len(mac)}"}
        )
        malformed = await http.post(
            "/verify",
            json={**row(), "response": {"id": "x"}},
            headers={"Cookie": f"{COOKIE}={cookie}"},
        )
        good = await http.post("/verify", json=body, headers={"Cookie": f"{COOKIE}={cookie}"})
        await http.post("/close_session", headers={"Cookie": f"{COOKIE}={cookie}"})
        after_close = await http.post(
            "/verify", json=body, headers={"Cookie": f"{COOKIE}={cookie}"}
        )
    assert [r.status_code for r in (missing, forged, malformed, good, after_close)] == [
        401,
        401,
        422,
        200,
        401,
    ]
    assert good.json()["reward"] == 1.0
    assert len(fake.refused) == 4


@pytest.mark.parametrize(
    ("behaviour", "cause"),
    [
        ("seed_500", "verifier_http_error"),
        ("status_500", "verifier_http_error"),
        ("not_json", "verifier_bad_answer"),
        ("huge", "verifier_answer_too_large"),
        ("hang", "verifier_timeout"),
        ("drip", "verifier_timeout"),  # bytes keep coming: only the whole-call limit ends it
    ],
)
async def test_a_failing_server_is_a_verifier_failure(behaviour: str, cause: str) -> None:
    async with fake_server() as (url, fake):
        with pytest.raises(VerifierFailure) as caught:
            await verify_remotely(url, row(behaviour), verify_body(row(behaviour), "42"), 1.5)
    assert caught.value.cause == cause, caught.value
    # A seeded session is closed even when verifying failed.
    assert all(s["closed"] for s in fake.log()["sessions"])


async def test_a_server_that_is_down_is_a_verifier_failure() -> None:
    sock = bind("127.0.0.1", 0)
    url = url_of(sock)
    sock.close()  # nothing listens there now
    with pytest.raises(VerifierFailure) as caught:
        await verify_remotely(url, row(), verify_body(row(), "42"), timeout_s=5)
    assert caught.value.cause == "verifier_unreachable"
