"""The red-team attack on the rollout viewer: a policy writes markup into its replies (they
reach the conversation, the tool calls and outputs, the grader's info, the token text and the
group page) hoping a trainer's browser runs it. Every page shows it as text and runs nothing
of it; an honest neighbour's page is untouched."""

import json
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.viewer.viewer_support import (
    MARKUP,
    Elements,
    echo_backend,
    echo_job,
    echo_registry,
)

from agentroll.server.schema import Outcome

pytestmark = [pytest.mark.redteam, pytest.mark.timeout(300)]

PAYLOAD = MARKUP


def assert_inert(html: str) -> None:
    """Only the viewer's own script; no element the payload could have made live."""
    page = Elements(html)
    scripts = [a for t, a, _ in page.all if t == "script"]
    assert scripts == [{"src": "/ui/static/viewer.js", "defer": ""}]
    assert [t for t, _, _ in page.all if t in ("img", "iframe", "object", "embed")] == []
    handlers = [(t, k) for t, a, _ in page.all for k in a if k.startswith("on")]
    assert handlers == []
    links = [a.get("href", "") for t, a, _ in page.all if t == "a"]
    assert not any(h.lower().startswith("javascript:") for h in links)


async def test_markup_a_policy_writes_renders_as_text_on_every_page(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        echo_job("attack", PAYLOAD, group="g", reward=0.0),
        echo_job("honest", "4", group="g", reward=1.0),  # the control
    ]
    async with (
        echo_backend(tmp_path / "tokenizer") as (_, spec),
        agentroll_server(registry=echo_registry()) as (server, client),
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
    ):
        await client.add_backend(spec)
        await client.submit(jobs)
        done = await client.wait_for(["attack", "honest"], 120)
        assert (done["attack"].outcome, done["attack"].reward) == (Outcome.ok, 0.0)
        assert (done["honest"].outcome, done["honest"].reward) == (Outcome.ok, 1.0)
        http.headers["authorization"] = f"Bearer {server.token}"
        pages = {
            path: await http.get(path)
            for path in ("/ui/rollout/attack", "/ui/group/g", "/ui/results", "/ui")
        }
        for path, page in pages.items():
            assert page.status_code == 200, path
            assert_inert(page.text)
            csp = page.headers["content-security-policy"]
            assert "script-src 'self';" in csp and "unsafe-inline" not in csp
        rollout = Elements(pages["/ui/rollout/attack"].text)
        conversation = "".join(t for _, t in rollout.find("div", id="conversation"))
        assert conversation.count(PAYLOAD) >= 3  # reply, tool call arguments, tool output
        info = "".join(t for _, t in rollout.find("pre", id="reward-info"))
        assert json.dumps(PAYLOAD, ensure_ascii=False) in info  # the grader's info, as JSON text
        sampled = "".join(
            t for a, t in rollout.find("span", class_="tok") if a.get("data-mask") == "1"
        )
        assert "<script>window.pwned=1</script>" in sampled  # the token text, as text
        group = Elements(pages["/ui/group/g"].text)
        assert PAYLOAD in "".join(t for _, t in group.find("div", id="group"))
        honest = Elements((await http.get("/ui/rollout/honest")).text)
        assert [t for _, t in honest.find("b", id="reward")] == ["1.0"]
        assert "4" in "".join(t for _, t in honest.find("div", id="conversation"))
