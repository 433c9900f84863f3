"""The viewer's pages read over HTTP: its auth, each page against a live server mid-run, the
token view against the trajectory the API returns, filters and pages over a stored database,
and `agentroll view`'s promise to read only."""

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.viewer.viewer_support import (
    EchoTurns,
    Elements,
    echo_backend,
    echo_job,
    echo_registry,
)

from agentroll.server.schema import Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.server.store import JobStore
from agentroll.server.ui.app import create_view_app
from agentroll.server.ui.queries import PAGE_SIZE
from agentroll.server.ui.source import ResultsReader, ViewerUnavailable
from agentroll.testing.viewer_data import fill_store, known_trajectory, store_trajectories
from agentroll.trainer_clients.adapters.batch import grpo_advantages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def test_ui_refuses_without_the_token_and_logs_a_browser_in_by_cookie(
    agentroll_server: ServerFactory,
) -> None:
    async with (
        agentroll_server(api_token="plain", admin_token="admin") as (server, _),
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
    ):
        for path in ("/ui", "/ui/results", "/ui/rollout/x", "/ui/static/viewer.js"):
            assert (await http.get(path)).status_code == 401, path
        assert (await http.get("/ui?token=wrong")).status_code == 401
        assert (await http.get("/ui", headers={"authorization": "Bearer no"})).status_code == 401
        bearer = await http.get("/ui/results", headers={"authorization": "Bearer plain"})
        assert bearer.status_code == 200 and "<h1>Results</h1>" in bearer.text

        login = await http.get("/ui/results?token=plain&outcome=ok")
        assert login.status_code == 303
        assert login.headers["location"] == "/ui/results?outcome=ok"  # the token leaves the URL
        cookie = login.headers["set-cookie"]
        assert {"HttpOnly", "SameSite=Strict", "Path=/ui"} <= {p.strip() for p in cookie.split(";")}
        value = cookie.split(";")[0].split("=", 1)[1]
        assert "plain" not in value and len(value) == 64
        assert (await http.get("/ui/results")).status_code == 200  # the cookie, kept by httpx
        odd = await http.get("/ui/x%0d%0aSet-Cookie:%20a=b?token=plain")
        assert odd.headers["location"] == "/ui/x%0D%0ASet-Cookie%3A%20a%3Db"  # one header, quoted
        # The cookie opens the viewer's read-only pages and nothing else, even as a bearer.
        assert (await http.get("/v1/status")).status_code == 401
        assert (
            await http.get("/v1/status", headers={"authorization": f"Bearer {value}"})
        ).status_code == 401
        assert (await http.post("/v1/generation/pause", json={})).status_code == 401
    async with (
        agentroll_server(api_token="rotated") as (server, _),
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        http.cookies.set("agentroll_ui", value, domain="127.0.0.1", path="/ui")
        assert (await http.get("/ui")).status_code == 401  # a rotated token ends old cookies


def _rows(html: str) -> list[dict[str, str]]:
    return [a for a, _ in Elements(html).find("tr", class_="row")]


async def test_each_page_against_a_live_server_mid_run(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """Two rollouts of a group done, a third held in RUN: the live page shows it running,
    the results page the finished ones, the rollout page their conversation and every token
    with the mask the API returned, the group page GRPO's advantages."""
    jobs = [
        echo_job("done-a", "four", group="g1", reward=1.0),
        echo_job("done-b", "five", group="g1", reward=0.0),
        echo_job("held", "six", group="g2", hold=True),
    ]
    async with (
        echo_backend(tmp_path / "tokenizer") as (_, spec),
        agentroll_server(registry=echo_registry()) as (server, client),
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
    ):
        await client.add_backend(spec)
        await client.submit(jobs)
        finished = await client.wait_for(["done-a", "done-b"], 120)
        assert (await http.get(f"/ui?token={server.token}")).status_code == 303  # logged in
        for _ in range(600):  # the held rollout is in RUN
            live = await http.get("/ui/live/fragment")
            if 'data-state="run"' in live.text:
                break
            await asyncio.sleep(0.05)
        page = Elements(live.text)
        assert [t for a, t in page.find("tr") if a.get("data-state") == "run"] == ["run1"]
        assert "scripted-0" in "".join(t for _, t in page.find("table", id="backends"))
        assert page.find("tr", data_stage="run")[0][1].startswith("run1 /")  # busy 1 of n

        results = await http.get("/ui/results")
        assert {r["data-cursor"] for r in _rows(results.text)} == {"1", "2"}

        trajectory = finished["done-a"]
        rollout = Elements((await http.get("/ui/rollout/done-a")).text)
        tokens = [
            a["data-mask"] for a, _ in rollout.find("span", class_="tok") if a.get("data-mask")
        ]
        assert [int(m) for m in tokens] == trajectory.response_mask
        assert 0 in trajectory.response_mask and 1 in trajectory.response_mask
        marks = [a["data-version"] for a, _ in rollout.find("span", class_="seg") if "title" in a]
        assert marks == [str(s.policy_version) for s in trajectory.segments]
        text = "".join(
            t for a, t in rollout.find("span", class_="tok") if a.get("data-mask") == "1"
        )
        assert "four" in text  # decoded with the backend's own tokenizer, not ids
        assert "four" in "".join(t for _, t in rollout.find("div", id="conversation"))
        exported = await http.get("/ui/rollout/done-a/export.json")
        assert exported.json()["response_ids"] == trajectory.response_ids

        group = Elements((await http.get("/ui/group/g1")).text)
        shown = {
            a["data-job"]: float(a["data-advantage"]) for a, _ in group.find("div", class_="member")
        }
        expected = grpo_advantages([1.0, 0.0], ["g1", "g1"])
        assert shown == pytest.approx(
            {"done-a": float(expected[0]), "done-b": float(expected[1])}, abs=1e-4
        )
        EchoTurns.held["held"].set()
        await client.wait_for(["held"], 120)


async def _all_pages(http: httpx.AsyncClient, query: str) -> list[dict[str, str]]:
    """Every row the results page lists for `query`, following its `older` links."""
    rows: list[dict[str, str]] = []
    url: str | None = f"/ui/results?{query}"
    while url is not None:
        page = await http.get(url)
        assert page.status_code == 200, page.text
        rows += _rows(page.text)
        older = Elements(page.text).find("a", id="older")
        url = older[0][0]["href"] if older else None
    return rows


def _expected(db: Path, where: str, params: tuple[Any, ...] = ()) -> list[str]:
    """Cursors (newest first) the stored results matching `where` have, read directly."""
    with sqlite3.connect(db) as conn:
        sql = f"SELECT cursor FROM results WHERE {where} ORDER BY cursor DESC"
        return [str(c) for (c,) in conn.execute(sql, params)]


async def test_filters_and_keyset_pages_over_a_stored_database(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    await fill_store(db, 260)
    reward = "json_extract(result_json, '$.reward')"
    cases = {
        "": ("1", ()),
        "handler=code": ("json_extract(result_json, '$.handler') = 'code'", ()),
        "outcome=agent_error": ("json_extract(result_json, '$.outcome') = 'agent_error'", ()),
        "reward_min=0.25&reward_max=0.75": (f"{reward} BETWEEN 0.25 AND 0.75", ()),
        "group=group-00007": ("json_extract(result_json, '$.group_id') = 'group-00007'", ()),
        "task=group-00009&outcome=ok": (
            "json_extract(result_json, '$.group_id') = 'group-00009' AND "
            "json_extract(result_json, '$.outcome') = 'ok'",
            (),
        ),
        "handler=math&reward_min=1": (
            f"json_extract(result_json, '$.handler') = 'math' AND {reward} >= 1",
            (),
        ),
    }
    server = await start_in_loop(create_view_app(db, "view-token"))
    try:
        headers = {"authorization": "Bearer view-token"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            for query, (where, params) in cases.items():
                rows = await _all_pages(http, query)
                cursors = [r["data-cursor"] for r in rows]
                assert cursors == _expected(db, where, params), query
                assert cursors, query  # every case matches something
            assert len(await _all_pages(http, "")) > PAGE_SIZE * 5  # it paged
            # Each handler's histogram counts exactly its rewarded results.
            counts = _histogram_counts((await http.get("/ui/results?outcome=ok")).text)
            for handler, total in counts.items():
                where = (
                    f"json_extract(result_json, '$.handler') = '{handler}' AND "
                    f"json_extract(result_json, '$.outcome') = 'ok' AND {reward} IS NOT NULL"
                )
                assert total == len(_expected(db, where)), handler
            assert set(counts) == {"math", "code", "swe", "stem"}
            bad = await http.get("/ui/results?reward_min=lots")
            assert bad.status_code == 400 and "reward_min must be a number" in bad.text
    finally:
        await server.stop()


def _histogram_counts(html: str) -> dict[str, int]:
    """Per handler's histogram, the sum of its bars' counts."""
    counts: dict[str, int] = {}
    handler = None
    for tag, attrs, _ in Elements(html).all:
        if tag == "figure" and "hist" in attrs.get("class", ""):
            handler = attrs["data-handler"]
            counts[handler] = 0
        elif tag == "g" and attrs.get("class") == "bar" and handler is not None:
            counts[handler] += int(attrs["data-count"])
    return counts


async def test_the_stored_viewer_reads_only(tmp_path: Path) -> None:
    """`agentroll view`'s app has no route that writes, its connection refuses writes, and
    serving every page leaves the database as it was."""
    db = tmp_path / "results.db"
    store = JobStore(db)
    await store.open()
    await store_trajectories(store, [known_trajectory(f"j{i}", group_id="g") for i in range(3)])
    await store.close()
    before = db.read_bytes()
    app = create_view_app(db, "t")
    methods = {m for route in app.routes for m in getattr(route, "methods", ()) or ()}
    assert methods <= {"GET", "HEAD"}
    server = await start_in_loop(app)
    try:
        headers = {"authorization": "Bearer t"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            for path in ("/ui", "/ui/results", "/ui/rollout/j1", "/ui/group/g", "/"):
                assert (await http.get(path, follow_redirects=True)).status_code == 200, path
            assert (await http.post("/ui/results")).status_code == 405
    finally:
        await server.stop()
    # The database is as it was, and nothing waits in a write-ahead log to be added to it
    # (readers of a WAL database keep its shared-memory index beside it: not data).
    assert db.read_bytes() == before
    wal = tmp_path / "results.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    reader = ResultsReader(db)
    try:
        with pytest.raises(ViewerUnavailable, match="readonly"):
            await reader.query(lambda conn: conn.execute("DELETE FROM results"))
    finally:
        await reader.close()


def test_agentroll_view_serves_a_database_behind_a_token_of_its_own(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    asyncio.run(fill_store(db, 20))
    url_file = tmp_path / "url"
    command = [sys.executable, "-m", "agentroll.server.cli", "view", str(db), "--port", "0"]
    view = subprocess.Popen(
        [*command, "--url-file", str(url_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert view.stdout is not None
        line = view.stdout.readline()  # printed once bound
        assert f"over {db}: http://127.0.0.1:" in line and "/ui?token=" in line
        login = line.rsplit(" ", 1)[1].strip()
        base = url_file.read_text().strip()
        assert login.startswith(base)
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/ui/results").status_code == 401
            assert http.get(login, follow_redirects=True).status_code == 200
            rows = _rows(http.get("/ui/results").text)
            assert len(rows) == 20
    finally:
        view.terminate()
        assert view.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it caught
    missing = subprocess.run(
        [*command[:4], str(tmp_path / "nope.db")], check=False, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no database at" in missing.stderr


async def test_agentroll_view_of_a_server_prints_its_login_link(
    agentroll_server: ServerFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agentroll.server.cli import main

    async with agentroll_server(api_token="the-token") as (server, _):
        monkeypatch.setenv("AGENTROLL_API_TOKEN", "the-token")
        assert await asyncio.to_thread(main, ["view", server.url]) == 0
        link = capsys.readouterr().out.strip().rsplit(" ", 1)[1]
        assert link == f"{server.url}/ui?token=the-token"
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await http.get(link, follow_redirects=True)).status_code == 200
    assert await asyncio.to_thread(main, ["view", server.url]) == 2  # it has stopped
    assert "no agentroll server answers at" in capsys.readouterr().err


async def test_the_token_view_shows_side_chains_and_agent_traces(tmp_path: Path) -> None:
    """A harness run's side chain (kept in `metadata.llm_proxy`) and a multi-agent job's
    traces each get their own token view, with their own masks and segments."""
    base = known_trajectory("main", turns=1)
    side = known_trajectory("side", turns=2, sampled=3, observed=2, policy_version=7)
    chain = {
        "index": 1,
        "main": False,
        **side.model_dump(
            include={"prompt_ids", "response_ids", "response_mask", "response_logprobs"}
        ),
        "segments": [s.model_dump() for s in side.segments],
    }
    proxy = {"chains": [{"index": 0, "main": True}, chain]}
    verifier = known_trajectory("v", turns=1, sampled=2, observed=1, policy_version=4)
    trace = {
        "name": "verifier",
        "policy": "verifier",
        "trainable": False,
        **verifier.model_dump(
            include={
                "prompt_ids",
                "response_ids",
                "response_mask",
                "response_logprobs",
                "segments",
                "policy_versions",
            }
        ),
    }
    with_side = Trajectory.model_validate(
        {**base.model_dump(), "metadata": {"llm_proxy": proxy}, "agents": [trace]}
    )
    db = tmp_path / "r.db"
    store = JobStore(db)
    await store.open()
    await store_trajectories(store, [with_side])
    await store.close()
    server = await start_in_loop(create_view_app(db, "t"))
    try:
        headers = {"authorization": "Bearer t"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
            page = Elements((await http.get("/ui/rollout/main")).text)
    finally:
        await server.stop()
    titles = [t for _, t in page.find("h3")]
    assert [t.split(" ")[0:3] for t in titles] == [
        ["main", "chain", "12"],
        ["agent", "verifier", "(policy"],
        ["side", "chain", "#1"],
    ]
    masks = [int(a["data-mask"]) for a, _ in page.find("span", class_="tok") if a.get("data-mask")]
    assert masks == base.response_mask + verifier.response_mask + side.response_mask
    versions = [a["data-version"] for a, _ in page.find("span", class_="seg") if "title" in a]
    assert versions == ["0", "4", "7", "8"]
