"""The viewer in headless Chromium: every page loads against a live server mid-run and over
a stored database, the live page refreshes in place, the filter form narrows the results,
the token view paints each token by its loss mask and logprob, markup a policy wrote runs
nothing, and no request leaves the viewer's own loopback server. Each page's screenshot is
written under the test's tmp dir (`screenshots/`); with `AGENTROLL_DOCS_SCREENSHOT=PATH`, the
rollout page's also to PATH (docs/viewer_rollout.png is made so)."""

import math
import os
import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.viewer.browser import Browser, chromium, needs_chromium
from tests.integration.viewer.viewer_support import (
    MARKUP,
    EchoTurns,
    echo_backend,
    echo_job,
    echo_registry,
)

from agentroll.server.serving import start_in_loop
from agentroll.server.ui.app import create_view_app
from agentroll.testing.viewer_data import fill_store

pytest.importorskip("selenium", reason="selenium comes with the dev extra (make)")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600), needs_chromium]

NOT_TRAINED = "rgb(228, 228, 228)"
SHADES = [
    "rgb(244, 182, 182)",
    "rgb(246, 208, 164)",
    "rgb(238, 230, 160)",
    "rgb(200, 232, 176)",
    "rgb(159, 220, 159)",
]
"""viewer.css's colours of a trained token, from probability near 0 (lp0) to near 1 (lp4)."""

ROWS = "[...document.querySelectorAll('#results tr.row')]"


def shade(logprob: float) -> str:
    return SHADES[min(int(math.exp(min(logprob, 0.0)) * len(SHADES)), len(SHADES) - 1)]


async def submit_filters(browser: Browser, **fields: str) -> None:
    """Fill the results page's filter form as a user would and submit it."""
    await browser.js(
        "const form = document.getElementById('filters');"
        "for (const [k, v] of Object.entries(arguments[0])) form.elements[k].value = v;"
        "form.querySelector('button[type=submit]').click();",
        fields,
    )
    wanted = next(iter(fields))
    await browser.until(
        f"location.search.includes('{wanted}=') && document.readyState == 'complete'"
    )


async def test_every_page_in_chromium_against_a_live_server_mid_run(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        echo_job("done-a", "four and more", group="g1", reward=1.0, turns=3),
        echo_job("done-b", "five", group="g1", reward=0.0),
        echo_job("markup", MARKUP, group="g3", reward=0.5),
        echo_job("held", "six", group="g2", hold=True),
    ]
    async with (
        echo_backend(tmp_path / "tokenizer") as (_, spec),
        agentroll_server(registry=echo_registry()) as (server, client),
        chromium(tmp_path) as browser,
    ):
        await client.add_backend(spec)
        await client.submit(jobs)
        finished = await client.wait_for(["done-a", "done-b", "markup"], 120)
        await browser.get(f"{server.url}/ui?token={server.token}")
        assert await browser.js("return location.href") == f"{server.url}/ui"  # token dropped
        await browser.until("Number(document.getElementById('live').dataset.refreshed) >= 2")
        run = "document.querySelector('#jobs-by-state tr[data-state=run] td:last-child')"
        assert await browser.until(f"{run} && {run}.textContent") == "1"
        assert "scripted-0" in await browser.js(
            "return document.getElementById('backends').textContent"
        )
        await browser.screenshot("live")

        await browser.get(f"{server.url}/ui/results")
        assert sorted(await browser.js(f"return {ROWS}.map(r => r.dataset.cursor)")) == [
            "1",
            "2",
            "3",
        ]
        await browser.screenshot("results")
        await submit_filters(browser, group="g1", reward_min="1")
        assert await browser.js(f"return {ROWS}.map(r => r.children[1].textContent)") == ["done-a"]

        trajectory = finished["done-a"]
        await browser.get(f"{server.url}/ui/rollout/done-a")
        painted = await browser.js(
            "return [...document.querySelectorAll('#token-view .response span.tok')]"
            ".map(s => [Number(s.dataset.mask), getComputedStyle(s).backgroundColor])"
        )
        assert [m for m, _ in painted] == trajectory.response_mask
        expected = [
            shade(lp) if m else NOT_TRAINED
            for m, lp in zip(trajectory.response_mask, trajectory.response_logprobs, strict=True)
        ]
        assert [colour for _, colour in painted] == expected
        assert 0 in trajectory.response_mask and 1 in trajectory.response_mask
        versions = await browser.js(
            "return [...document.querySelectorAll('#token-view span.seg')]"
            ".map(s => s.dataset.version)"
        )
        assert versions == [str(s.policy_version) for s in trajectory.segments]
        await browser.js("document.getElementById('tokens').scrollIntoView()")
        shot = await browser.screenshot("rollout")
        if target := os.environ.get("AGENTROLL_DOCS_SCREENSHOT"):
            shutil.copyfile(shot, target)

        await browser.get(f"{server.url}/ui/group/g1")
        members = await browser.js(
            "return [...document.querySelectorAll('#group .member')]"
            ".map(m => [m.dataset.job, Number(m.dataset.advantage)])"
        )
        assert dict(members) == pytest.approx({"done-a": 0.7071, "done-b": -0.7071}, abs=1e-3)
        await browser.screenshot("group")

        await browser.get(f"{server.url}/ui/rollout/markup")
        text = await browser.js("return document.getElementById('conversation').textContent")
        assert MARKUP in text  # shown as text...
        assert await browser.js("return typeof window.pwned") == "undefined"  # ...run never
        await browser.assert_only_from(server.url)
        EchoTurns.held["held"].set()
        await client.wait_for(["held"], 120)


async def test_every_page_in_chromium_over_a_stored_database(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    await fill_store(db, 300)
    server = await start_in_loop(create_view_app(db, "view-token"))
    try:
        async with chromium(tmp_path) as browser:
            await browser.get(f"{server.url}/ui?token=view-token")
            assert "stored database" in await browser.js("return document.body.textContent")
            assert (
                await browser.js("return document.getElementById('results-cursor').textContent")
                == "300"
            )
            await browser.screenshot("stored-live")
            await browser.get(f"{server.url}/ui/results")
            await submit_filters(browser, handler="code", reward_min="1")
            rows = await browser.js(
                f"return {ROWS}.map(r => [r.dataset.handler, r.dataset.reward])"
            )
            assert rows and {h for h, _ in rows} == {"code"} and min(float(r) for _, r in rows) >= 1
            histograms = await browser.js(
                "return [...document.querySelectorAll('figure.hist')].map(f => f.dataset.handler)"
            )
            assert histograms == ["code"]
            await browser.screenshot("stored-results")
            await browser.get(f"{server.url}/ui/results")
            first = await browser.js(f"return {ROWS}.map(r => Number(r.dataset.cursor))")
            await browser.js("document.getElementById('older').click()")
            await browser.until("location.search.includes('before=')")
            older = await browser.js(f"return {ROWS}.map(r => Number(r.dataset.cursor))")
            assert first == list(range(300, 250, -1)) and older == list(range(250, 200, -1))
            job = await browser.js(f"return {ROWS}[0].children[1].textContent")
            await browser.get(f"{server.url}/ui/rollout/{job}")
            masks = await browser.js(
                "return [...document.querySelectorAll('#token-view .response span.tok')]"
                ".map(s => [s.dataset.mask, getComputedStyle(s).backgroundColor])"
            )
            assert {c for m, c in masks if m == "0"} == {NOT_TRAINED}
            assert {c for m, c in masks if m == "1"} <= set(SHADES)
            await browser.screenshot("stored-rollout")
            group = await browser.js(
                "return document.querySelector('.card a[href^=\"/ui/group/\"]').textContent"
            )
            await browser.get(f"{server.url}/ui/group/{group}")
            assert (
                len(await browser.js("return [...document.querySelectorAll('#group .member')]"))
                == 4
            )
            await browser.screenshot("stored-group")
            await browser.assert_only_from(server.url)
    finally:
        await server.stop()
