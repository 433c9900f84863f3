"""The rollout viewer against what a policy can make big or odd, and a neighbour's odd query.

A policy sets the size of its own trajectory (long replies, many side chains through its own
proxy), and a live server renders the viewer's pages on its event loop: a rollout page must
cost the same bounded work however long the rollout, while the full trajectory stays one
click away (`export.json`). Query numbers SQLite cannot hold are the asker's error (400),
not the server's (500).
"""

import json
import re
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.viewer.viewer_support import MARKUP, Elements

from agentroll.server.schema import Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.server.store import JobStore
from agentroll.server.ui import queries, tokens
from agentroll.server.ui.app import create_view_app
from agentroll.server.ui.cli import login_url
from agentroll.server.ui.source import open_read_only
from agentroll.testing.viewer_data import known_trajectory, store_trajectories

pytestmark = [pytest.mark.redteam, pytest.mark.timeout(300)]

SIDE_TOKENS = 150_000


def _huge() -> Trajectory:
    """~170k tokens in the main chain and a side chain of 150k, as a harness run can leave."""
    trajectory = known_trajectory("huge", turns=60, sampled=2_800, reply=MARKUP)
    side = {
        "index": 1,
        "main": False,
        "prompt_ids": list(range(5, 2_005)),
        "response_ids": [7] * SIDE_TOKENS,
        "response_mask": [1] * SIDE_TOKENS,
        "response_logprobs": [-0.5] * SIDE_TOKENS,
        "segments": [{"start": 0, "end": SIDE_TOKENS, "backend_id": "b", "policy_version": 0}],
    }
    metadata = {"llm_proxy": {"chains": [{"index": 0, "main": True}, side]}}
    return trajectory.model_copy(update={"metadata": metadata})


async def _store(db: Path, stored: list[Trajectory]) -> Path:
    store = JobStore(db, synchronous="OFF")
    await store.open()
    await store_trajectories(store, stored)
    await store.close()
    return db


@asynccontextmanager
async def _viewer(tmp_path: Path, stored: list[Trajectory]) -> AsyncIterator[httpx.AsyncClient]:
    db = await _store(tmp_path / "results.db", stored)
    async with _serving(db) as http:
        yield http


@asynccontextmanager
async def _serving(db: Path) -> AsyncIterator[httpx.AsyncClient]:
    server = await start_in_loop(create_view_app(db, "t"))
    try:
        headers = {"authorization": "Bearer t"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120) as http:
            yield http
    finally:
        await server.stop()


def _token_spans(html: str) -> list[str]:
    """The classes of every token span of the token view (the legend's three excluded)."""
    view = html.split('<div id="token-view">', 1)[1]
    return re.findall(r'<span class="(tok [^"]*)"', view)


async def test_a_huge_rollout_page_shows_a_bounded_part_and_exports_all(tmp_path: Path) -> None:
    huge, honest = _huge(), known_trajectory("honest")
    async with _viewer(tmp_path, [huge, honest]) as http:
        page = await http.get("/ui/rollout/huge")
        exported = (await http.get("/ui/rollout/huge/export.json")).json()
        small = await http.get("/ui/rollout/honest")
    assert page.status_code == 200
    shown = _token_spans(page.text)
    assert 0 < len(shown) <= tokens.TOKENS_SHOWN
    assert len(page.text) < 8 * 1024 * 1024  # not a span per token of ~320k, nor every id
    total = len(huge.prompt_ids) + len(huge.response_ids) + 2_000 + SIDE_TOKENS
    notes = re.findall(r"([\d,]+) tokens not shown", page.text)
    left_out = [int(n.replace(",", "")) for n in notes]
    assert sum(left_out) == total - len(shown)  # the page says what it left out
    assert "export.json" in page.text and "not shown" in page.text
    conversation = "".join(t for _, t in Elements(page.text).find("div", id="conversation"))
    assert MARKUP in conversation  # the conversation is still there, as text
    assert exported["response_ids"] == huge.response_ids  # the export keeps every token
    assert len(exported["metadata"]["llm_proxy"]["chains"][1]["response_ids"]) == SIDE_TOKENS
    # The control: an ordinary rollout shows every token and says nothing is left out.
    spans = _token_spans(small.text)
    assert len(spans) == len(honest.prompt_ids) + len(honest.response_ids)
    assert "not shown" not in small.text


@pytest.mark.parametrize(
    "query", ["before=99999999999999999999", "policy_version=99999999999999999999"]
)
async def test_numbers_past_sqlite_integers_are_the_askers_error(
    tmp_path: Path, query: str
) -> None:
    async with _viewer(tmp_path, [known_trajectory("j", policy_version=3)]) as http:
        odd = await http.get(f"/ui/results?{query}")
        control = await http.get("/ui/results?before=99&policy_version=3")
    assert odd.status_code == 400, odd.text
    assert "too large" in odd.json()["error"]["message"]
    assert control.status_code == 200
    assert [a["data-cursor"] for a, _ in Elements(control.text).find("tr", class_="row")] == ["1"]


def test_segment_fields_stay_inside_their_attribute() -> None:
    """A segment's every field reaches the page as text, whoever wrote it."""
    hostile = '"><img src=x onerror="window.pwned=1">'
    segment = {"start": 0, "end": hostile, "backend_id": hostile, "finish_reason": hostile}
    chain = tokens.Chain("c", [1], [5, 6], [1, 1], [-0.1, -0.1], [segment])
    html = str(tokens.render_chain(chain, tokens.TokenDecoder([])))
    page = Elements(html)
    assert [t for t, _, _ in page.all if t == "img"] == []
    assert [k for _, a, _ in page.all for k in a if k.startswith("on")] == []
    titles = [a["title"] for a, _ in page.find("span", class_="seg")]
    assert titles and all(hostile in t for t in titles)
    # The control: an ordinary segment's title names its token range.
    plain = {"start": 0, "end": 2, "backend_id": "b", "policy_version": 0}
    ordinary = tokens.Chain("c", [1], [5, 6], [1, 1], [-0.1, -0.1], [plain])
    html = str(tokens.render_chain(ordinary, tokens.TokenDecoder([])))
    assert [a["title"] for a, _ in Elements(html).find("span", class_="seg")] == ["segment [0, 2)"]


async def test_the_printed_login_link_opens_the_viewer_and_nothing_else(
    agentroll_server: ServerFactory,
) -> None:
    """A login link ends up in terminals, shell history and the browser's history (a redirect
    keeps the address it came from): it must not carry the API token, which submits jobs,
    registers backends and, without an admin token, pauses the fleet."""
    async with agentroll_server(api_token="the-api-token") as (server, _):
        link = login_url(server.url, "the-api-token")
        assert "the-api-token" not in link
        key = link.rsplit("=", 1)[1]
        async with httpx.AsyncClient(timeout=30) as http:
            page = await http.get(link, follow_redirects=True)
            assert page.status_code == 200 and "<h1>" in page.text  # logged in, by cookie
            for path in ("/v1/status", "/v1/backends"):
                as_bearer = await http.get(
                    server.url + path, headers={"authorization": f"Bearer {key}"}
                )
                assert as_bearer.status_code == 401, path
        # The control: the API token itself still logs a browser in, as documented; a key
        # that is not this token's does not.
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await http.get(f"{server.url}/ui?token={key[::-1]}")).status_code == 401
            login = await http.get(f"{server.url}/ui?token=the-api-token")
            assert login.status_code == 303 and "agentroll_ui=" in login.headers["set-cookie"]


async def test_a_group_page_reads_no_token_ids(tmp_path: Path) -> None:
    """A group page shows each member's reward and last reply: a group of huge rollouts
    (the policy sets their length) must not be loaded whole, up to 64 of them at once."""
    members = [
        known_trajectory(f"m{i}", group_id="g", turns=50, sampled=4_000, reward=float(i % 2))
        for i in range(8)
    ]
    db = await _store(tmp_path / "results.db", members)
    connection = open_read_only(db)
    tracemalloc.start()
    try:
        results = queries.group_results(connection, "g")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        connection.close()
    assert peak < 16 * 1024 * 1024  # each member's 200k token ids alone are ~10 MB parsed
    assert [r["job_id"] for r in results] == [f"m{i}" for i in range(8)]
    assert [r["reward"] for r in results] == [float(i % 2) for i in range(8)]
    assert {r["num_turns"] for r in results} == {50}
    assert results[0]["messages"][-2]["content"] == "the answer is 4 (turn 49)"
    async with _serving(db) as http:
        page = Elements((await http.get("/ui/group/g")).text)
    replies = [t for _, t in page.find("pre")]
    assert replies == ["the answer is 4 (turn 49)"] * 8  # each member's last reply


ODD_MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}, {"type": "image"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"function": "python"}, "call", 7]},
    {"role": "assistant", "content": {"odd": MARKUP}, "tool_calls": {"function": {}}},
    {"role": "assistant", "content": "4", "tool_calls": [{"function": {"name": 5}}]},
]


async def test_odd_message_shapes_a_harness_sent_never_hide_a_rollout(tmp_path: Path) -> None:
    """A harness's conversation is the policy's to shape: whatever the stored messages hold,
    the rollout and its group still open, showing what is there."""
    odd = known_trajectory("odd", group_id="g").model_copy(update={"messages": ODD_MESSAGES})
    async with _viewer(tmp_path, [odd, known_trajectory("honest", group_id="h")]) as http:
        page = await http.get("/ui/rollout/odd")
        group = await http.get("/ui/group/g")
        control = await http.get("/ui/rollout/honest")
    assert page.status_code == 200, page.text
    conversation = "".join(t for _, t in Elements(page.text).find("div", id="conversation"))
    assert "What is 2 + 2?\n[image]" in conversation  # a part that is not text, named
    assert json.dumps({"odd": MARKUP}, ensure_ascii=False) in conversation  # as text
    assert group.status_code == 200, group.text
    assert "4" in "".join(t for _, t in Elements(group.text).find("div", id="group"))
    assert control.status_code == 200
    assert "the answer is 4 (turn 2)" in control.text
