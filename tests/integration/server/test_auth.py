"""The API is never open: every route but the probes needs a token, generated when none is
configured; admin routes refuse the plain token when an admin token is set."""

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry

from agentroll.server.api import create_app
from agentroll.server.api.middleware import OPEN_PATHS
from agentroll.server.schema.auth import TOKEN_FILE_ENV
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.trainer_clients import ApiError, AsyncRolloutClient

pytestmark = pytest.mark.integration

ADMIN_ROUTES = {
    ("POST", "/v1/generation/pause"),
    ("POST", "/v1/generation/resume"),
    ("POST", "/v1/backends"),
    ("POST", "/v1/backends/{backend_id}/drain"),
    ("DELETE", "/v1/backends/{backend_id}"),
    ("PATCH", "/v1/admin/pools"),
    ("POST", "/v1/admin/shutdown"),
}
"""What only the admin token may call when one is set (and `POST /v1/jobs/cancel` with
`all`). Written out, so that a route joining or leaving the set is a visible decision."""


def _route_table(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, its docs and hidden routes included."""
    return [
        (method, route.path)
        for route in iter_route_contexts(app.routes)
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]


ROUTES = _route_table(create_app(Settings(api_token="collect-only")))


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1] not in OPEN_PATHS])
async def test_every_route_refuses_a_caller_without_the_generated_token(
    method: str, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_FILE_ENV)
    app = create_app(Settings(db_path=tmp_path / "agentroll.db"))  # no token configured
    token = (tmp_path / "api-token").read_text().strip()
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))  # from loopback
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": token}):
            r = await http.request(method, _concrete(path), json={}, headers=headers)
            assert r.status_code == 401, (method, path, headers)
            assert r.json()["error"]["type"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"


async def test_the_plain_token_is_refused_exactly_on_the_admin_routes(
    agentroll_server: ServerFactory,
) -> None:
    """Every route, called with the plain token: 403 on the declared admin set, on no other;
    the admin token passes everywhere (shutdown aside: it would end the test's server)."""
    async with (
        agentroll_server(api_token="plain", admin_token="admin") as (server, _),
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
    ):

        async def status(method: str, path: str, token: str) -> int:
            body = None if method in ("GET", "DELETE") else {}
            headers = {"authorization": f"Bearer {token}"}
            async with http.stream(method, _concrete(path), json=body, headers=headers) as r:
                return r.status_code  # headers only: /v1/results/stream never ends

        refused = {r for r in ROUTES if await status(*r, "plain") == 403}
        assert refused == ADMIN_ROUTES
        for route in ADMIN_ROUTES - {("POST", "/v1/admin/shutdown")}:
            assert await status(*route, "admin") not in (401, 403), route
    assert {"/healthz", "/readyz"} == OPEN_PATHS and {p for _, p in ROUTES} >= OPEN_PATHS


async def test_probes_answer_without_a_token_and_metrics_only_when_made_public(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server() as (server, _), httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).json() == {"ready": True, "backends": 0}
        assert (await http.get("/metrics")).status_code == 401
        bearer = {"authorization": f"Bearer {server.token}"}
        authed = await http.get("/metrics", headers=bearer)
        assert authed.status_code == 200 and "agentroll_jobs_live" in authed.text
    async with (
        agentroll_server(metrics_public=True) as (server, _),
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        r = await http.get("/metrics")
        assert r.status_code == 200 and "agentroll_jobs_live" in r.text
        assert (await http.get("/v1/results")).status_code == 401  # nothing else opened


@pytest.mark.parametrize(("method", "path"), sorted(ADMIN_ROUTES))
async def test_the_plain_token_gets_403_on_admin_routes_when_an_admin_token_is_set(
    method: str, path: str
) -> None:
    app = create_app(Settings(api_token="plain", admin_token="admin"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        r = await http.request(
            method, _concrete(path), json={}, headers={"authorization": "Bearer plain"}
        )
    assert r.status_code == 403
    assert r.json()["error"] == {
        "type": "forbidden",
        "message": "this route needs the admin token (admin_token)",
        "detail": None,
    }


async def test_admin_token_separation_through_the_client(
    agentroll_server: ServerFactory,
) -> None:
    backend: dict[str, Any] = {"id": "b0", "base_url": "http://127.0.0.1:9"}
    async with agentroll_server(
        registry=make_registry(Gates()), api_token="plain", admin_token="admin"
    ) as (server, _):
        plain = AsyncRolloutClient(server.url, token="plain")
        admin = AsyncRolloutClient(server.url, token="admin")
        try:
            await plain.submit([job("j1", block=["run"]), job("j2", block=["run"])])
            with pytest.raises(ApiError) as refused:
                await plain.add_backend(backend)
            assert (refused.value.status, refused.value.type) == (403, "forbidden")
            with pytest.raises(ApiError) as refused:
                await plain.cancel_where(all=True)  # every submitter's jobs: admin only
            assert refused.value.status == 403
            assert await plain.cancel_where(job_ids=["j1"]) == ["j1"]  # its own jobs: fine
            assert (await admin.add_backend(backend)).id == "b0"
            assert await admin.cancel_where(all=True) == ["j2"]
            assert (await admin.status()).accepting  # the admin token works everywhere
        finally:
            await plain.close()
            await admin.close()


async def test_one_token_does_everything_without_an_admin_token(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        assert server.token is not None
        assert (await client.add_backend({"id": "b0", "base_url": "http://127.0.0.1:9"})).id
        assert (await client.resize_pools(run=4)).run == 4
        assert (await client.pause()).paused
        assert not (await client.resume(policy_version=1)).paused


async def test_a_client_keeps_working_across_a_restart_on_the_same_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_FILE_ENV)
    settings = Settings(db_path=tmp_path / "state" / "agentroll.db", shutdown_grace_s=0.5)
    first = await start_in_loop(create_app(settings))
    port = int(first.url.rsplit(":", 1)[1])
    client = AsyncRolloutClient(first.url, token_file=tmp_path / "state" / "api-token")
    try:
        assert (await client.status()).accepting
        await first.stop()
        second = await start_in_loop(create_app(settings), port=port)
        try:
            assert second.token == first.token
            assert (await client.status()).accepting  # the same client, no new token
        finally:
            await second.stop()
    finally:
        await client.close()


def test_a_websocket_is_closed_before_any_route_sees_it() -> None:
    http = TestClient(create_app(Settings(api_token="plain")))  # no lifespan: nothing started
    bearer = {"authorization": "Bearer plain"}
    with pytest.raises(WebSocketDisconnect) as closed, http.websocket_connect("/v1/status", bearer):
        pass
    assert closed.value.code == 1008
