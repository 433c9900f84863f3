"""The v1 API contract: idempotency, strict input, one error envelope, durable results."""

import asyncio
import json

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry

from agentroll.server.schema import Outcome
from agentroll.trainer_clients import AsyncRolloutClient, Conflict, InvalidRequest, NotFound
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration


def _envelope(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "detail"}
    return dict(body["error"])


async def test_resubmit_is_idempotent_and_conflicts_are_refused_whole(
    agentroll_server: ServerFactory,
) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        first = await client.submit([job("a", reward=1.0), job("b")])
        assert [(j.job_id, j.created) for j in first] == [("a", True), ("b", True)]
        await client.wait_for(["a", "b"], 10)
        again = await client.submit([job("a", reward=1.0)])
        assert again[0].created is False and again[0].state.value == "completed"
        with pytest.raises(Conflict) as info:
            await client.submit([job("c"), job("a", reward=0.0)])
        assert info.value.status == 409 and info.value.detail == ["a"]
        with pytest.raises(NotFound):
            await client.job("c")  # the whole batch was refused: nothing admitted
        with pytest.raises(Conflict):
            await client.submit([job("d", reward=1.0), job("d", reward=0.0)])
        # one result per job, however often it was submitted
        page = await client.results(0, 100)
        assert sorted(t.job_id for t in page.results) == ["a", "b"]
        generated = await client.submit([{"handler": "steered", "instance": {}}])
        assert len(generated[0].job_id) == 32 and generated[0].created


async def test_bad_input_gets_clear_4xx_envelopes(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates()), max_body_bytes=4096) as (
        server,
        client,
    ):
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            r = await http.post("/v1/jobs", json={"handler": "nope", "instance": {}})
            err = _envelope(r)
            assert r.status_code == 400 and err["type"] == "unknown_handler"
            assert "steered" in str(err["message"]) and "steered" in err["detail"]["known"]  # type: ignore[index]

            r = await http.post(
                "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
            )
            assert r.status_code == 400 and _envelope(r)["type"] == "invalid_request"

            r = await http.post(
                "/v1/jobs", json={"handler": "steered", "instance": {}, "colour": 1}
            )
            err = _envelope(r)
            assert r.status_code == 400 and "colour" in json.dumps(err["detail"])

            r = await http.post("/v1/jobs", json={"jobs": []})
            assert r.status_code == 400

            r = await http.post(
                "/v1/jobs", content=b"x" * 5000, headers={"content-type": "application/json"}
            )
            assert r.status_code == 413 and _envelope(r)["type"] == "payload_too_large"

            r = await http.get("/v1/jobs/missing")
            assert r.status_code == 404 and _envelope(r)["type"] == "not_found"

            r = await http.get("/v1/results", params={"limit": 0})
            assert r.status_code == 400

            r = await http.patch("/v1/admin/pools", json={"run": 0})
            assert r.status_code == 400
        assert (await client.status()).jobs_by_state == {}  # nothing was admitted


async def test_math_instances_are_validated_at_submission(agentroll_server: ServerFactory) -> None:
    async with agentroll_server() as (_, client):
        with pytest.raises(InvalidRequest) as info:
            await client.submit(
                [{"handler": "math", "instance": {"question": "1+1"}, "job_id": "m"}]
            )
        assert info.value.type == "invalid_instance"
        assert "answer" in json.dumps(info.value.detail)


async def test_results_cursor_long_poll_and_single_result(agentroll_server: ServerFactory) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        empty = await client.results(0, 10)
        assert empty.results == [] and empty.next_cursor == 0
        await client.submit([job("slow", block=["run"]), job("fast")])
        fast = await client.result("fast", wait=10)
        assert fast is not None and fast.cursor == 1
        assert await client.result("slow", wait=0.05) is None  # 202: still running
        poll = asyncio.create_task(client.results(after=1, limit=10, wait=10))
        await asyncio.sleep(0.1)
        assert not poll.done()  # long-poll holds while nothing is new
        gates.open["run"].set()
        page = await asyncio.wait_for(poll, 10)
        assert [t.job_id for t in page.results] == ["slow"] and page.next_cursor == 2
        assert (await client.results(after=2, limit=10)).results == []
        view = await client.job("slow")
        assert view.result is not None and view.result.outcome is Outcome.ok
        assert view.timing.run is not None and view.timing.run.work_s > 0


async def test_sse_stream_resumes_from_last_event_id(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        await client.submit([job(f"j{i}") for i in range(3)])
        await client.wait_for(["j0", "j1", "j2"], 10)
        async with httpx.AsyncClient(
            base_url=server.url, headers=auth_headers(server.url), timeout=10
        ) as http:
            events: list[tuple[str, str]] = []
            async with http.stream(
                "GET", "/v1/results/stream", headers={"Last-Event-ID": "1"}
            ) as stream:
                event_id = ""
                async for line in stream.aiter_lines():
                    if line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        events.append((event_id, json.loads(line[6:])["job_id"]))
                        if len(events) == 2:
                            break
        cursors = [e[0] for e in events]
        assert cursors == ["2", "3"]


async def test_token_is_required_when_configured(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(api_token="s3cret") as (server, _):
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200  # liveness stays open
            r = await http.get("/v1/status")
            assert r.status_code == 401 and _envelope(r)["type"] == "unauthorized"
            r = await http.get("/v1/status", headers={"authorization": "Bearer wrong"})
            assert r.status_code == 401
        async with AsyncRolloutClient(server.url, token="s3cret") as authed:
            assert (await authed.status()).accepting


async def test_shutdown_persists_unfinished_jobs_as_cancelled(
    agentroll_server: ServerFactory,
) -> None:
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates)) as (server, client):
        await client.submit([job("stuck", block=["run"])])
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            assert (await http.post("/v1/admin/shutdown")).status_code == 202
        await asyncio.wait_for(asyncio.shield(server.task), 10)  # it stops by itself
    async with agentroll_server(registry=make_registry(gates)) as (_, client):
        result = await client.result("stuck")
        assert result is not None and result.outcome is Outcome.cancelled
        assert result.error is not None and result.error.type == "server_shutdown"
        assert (await client.status()).jobs_by_state == {}  # nothing requeued


async def test_submissions_are_refused_once_shutting_down(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, _):
        server.server.config.app.state.service.accepting = False
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            r = await http.post("/v1/jobs", json=job("late"))
            assert r.status_code == 503 and _envelope(r)["type"] == "shutting_down"
            assert r.headers["retry-after"] == "5"
            assert (await http.get("/readyz")).status_code == 503


async def test_admin_token_guards_weight_sync_pools_and_shutdown(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(api_token="user", admin_token="admin") as (server, _):
        user = {"authorization": "Bearer user"}
        admin = {"authorization": "Bearer admin"}
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/v1/status", headers=user)).status_code == 200
            for method, path, body in [
                ("POST", "/v1/generation/pause", {}),
                ("POST", "/v1/generation/resume", {"policy_version": 1}),
                ("PATCH", "/v1/admin/pools", {"run": 4}),
            ]:
                r = await http.request(method, path, json=body, headers=user)
                assert r.status_code == 403 and _envelope(r)["type"] == "forbidden", path
                r = await http.request(method, path, json=body, headers=admin)
                assert r.status_code == 200, path
            # The admin token does what the plain one does, too.
            assert (await http.get("/v1/status", headers=admin)).status_code == 200


async def test_deeply_nested_input_is_refused(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        nested: dict[str, object] = {"leaf": 1}
        for _ in range(40):
            nested = {"x": nested}
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            r = await http.post("/v1/jobs", json=job("deep", **nested))
            assert r.status_code == 400 and "nested deeper" in json.dumps(_envelope(r)["detail"])
            body = '{"handler":"steered","instance":{"x":' + "[" * 50_000 + "]" * 50_000 + "}}"
            r = await http.post(
                "/v1/jobs", content=body, headers={"content-type": "application/json"}
            )
            assert r.status_code == 400 and _envelope(r)["type"] == "invalid_request"
        assert (await client.status()).accepting  # the server shrugged it off


async def test_per_client_concurrency_limit_answers_429(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates()), max_requests_per_client=4) as (
        server,
        client,
    ):
        await client.submit([job("slow", block=["run"])])
        async with httpx.AsyncClient(
            base_url=server.url, headers=auth_headers(server.url), timeout=30
        ) as http:
            polls = [
                asyncio.create_task(http.get("/v1/jobs/slow/result", params={"wait": 2}))
                for _ in range(4)
            ]
            await asyncio.sleep(0.2)
            r = await http.get("/v1/status")
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert _envelope(r)["type"] == "too_many_requests"
            await asyncio.gather(*polls)
            assert (await http.get("/v1/status")).status_code == 200  # slots came back


async def test_abandoned_long_polls_are_released_at_once(agentroll_server: ServerFactory) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (server, client):
        await client.submit([job("slow", block=["run"])])
        baseline = len(asyncio.all_tasks())
        async with httpx.AsyncClient(
            base_url=server.url, headers=auth_headers(server.url), timeout=120
        ) as http:
            polls = [
                asyncio.create_task(http.get("/v1/results", params={"after": 0, "wait": 60}))
                for _ in range(40)
            ] + [
                asyncio.create_task(http.get("/v1/jobs/slow/result", params={"wait": 60}))
                for _ in range(40)
            ]
            async with asyncio.timeout(30):  # until the server holds every wait
                while len(asyncio.all_tasks()) <= baseline + 80:
                    await asyncio.sleep(0.05)
            for poll in polls:
                poll.cancel()  # the trainer vanishes mid-wait
            await asyncio.gather(*polls, return_exceptions=True)
        async with asyncio.timeout(5):  # far sooner than the 60 s the polls asked for
            while len(asyncio.all_tasks()) > baseline:
                await asyncio.sleep(0.05)


async def test_refusals_keep_their_exact_envelopes(agentroll_server: ServerFactory) -> None:
    """Status, `type`, message, detail and Retry-After of each refusal the service raises."""
    gates = Gates()
    async with agentroll_server(registry=make_registry(gates), max_live_jobs=1) as (server, _):
        async with httpx.AsyncClient(base_url=server.url, headers=auth_headers(server.url)) as http:
            assert (await http.post("/v1/jobs", json=job("a", block=["run"]))).status_code == 200

            r = await http.post("/v1/jobs", json=job("a", other=1))
            assert (r.status_code, _envelope(r)) == (
                409,
                {
                    "type": "conflict",
                    "message": "job id(s) already used for a different request",
                    "detail": ["a"],
                },
            )
            assert "retry-after" not in r.headers

            r = await http.post("/v1/jobs", json=job("b"))
            assert (r.status_code, _envelope(r)) == (
                429,
                {"type": "too_many_jobs", "message": "at most 1 unfinished jobs", "detail": None},
            )
            assert r.headers["retry-after"] == "5"

            r = await http.post(
                "/v1/jobs", json={"handler": "math", "instance": {"question": "1+1"}, "job_id": "m"}
            )
            err = _envelope(r)
            assert (r.status_code, err["type"], err["message"]) == (
                400,
                "invalid_instance",
                "invalid task instance(s)",
            )
            assert [(p["index"], p["job_id"]) for p in err["detail"]] == [(0, "m")]  # type: ignore[attr-defined]
            assert "answer" in err["detail"][0]["error"]  # type: ignore[index]

            r = await http.get("/v1/jobs/missing/result")
            assert (r.status_code, _envelope(r)) == (
                404,
                {"type": "not_found", "message": "no job 'missing'", "detail": None},
            )

            spec = {"id": "b1", "base_url": "http://127.0.0.1:9"}
            assert (await http.post("/v1/backends", json=spec)).status_code == 201
            r = await http.post("/v1/backends", json={**spec, "model": "other"})
            assert (r.status_code, _envelope(r)) == (
                409,
                {
                    "type": "conflict",
                    "message": "backend 'b1' exists with a different spec",
                    "detail": None,
                },
            )
            r = await http.delete("/v1/backends/nope")
            assert (r.status_code, _envelope(r)) == (
                404,
                {"type": "not_found", "message": "no backend 'nope'", "detail": None},
            )

            assert (await http.post("/v1/generation/pause", json={})).status_code == 200
            assert (
                await http.post("/v1/generation/resume", json={"policy_version": 2})
            ).status_code == 200
            r = await http.post("/v1/generation/resume", json={"policy_version": 1})
            assert (r.status_code, _envelope(r)) == (
                409,
                {
                    "type": "conflict",
                    "message": "policy_version 1 is older than the current 2",
                    "detail": None,
                },
            )

            server.server.config.app.state.service.accepting = False
            r = await http.post("/v1/jobs", json=job("late"))
            assert (r.status_code, _envelope(r)) == (
                503,
                {"type": "shutting_down", "message": "the server is shutting down", "detail": None},
            )
        gates.open["run"].set()
