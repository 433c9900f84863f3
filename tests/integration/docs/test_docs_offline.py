"""The docs site as `make docs` builds it, opened from disk in a real browser: search works,
and no page asks for anything from elsewhere (the theme's offline plugin would load a
worker shim from a CDN; the site ships its own, docs/assets/iframe-worker-shim.js)."""

import asyncio
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

from selenium.webdriver.common.by import By
from tests.integration.viewer.browser import chromium, needs_chromium

REPO = Path(__file__).resolve().parents[3]
NETWORK = ("http", "https", "ws", "wss")


async def _build(site: Path) -> None:
    build = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site),
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(build.communicate(), 600)
    finally:
        if build.returncode is None:
            build.kill()
            await build.wait()
    assert build.returncode == 0, out.decode(errors="replace")[-3000:]


def _scripts_from_elsewhere(site: Path) -> list[str]:
    found = []
    for page in site.rglob("*.html"):
        for src in re.findall(r"<script[^>]*\ssrc=\"([^\"]+)\"", page.read_text()):
            if urlsplit(src).scheme in NETWORK:
                found.append(f"{page.relative_to(site)}: {src}")
    return found


@needs_chromium
async def test_search_works_from_disk_and_nothing_is_fetched(tmp_path: Path) -> None:
    site = tmp_path / "site"
    await _build(site)
    assert _scripts_from_elsewhere(site) == []
    async with chromium(tmp_path) as browser:
        await browser.get((site / "index.html").as_uri())
        query = await browser.call(
            browser.driver.find_element, By.CSS_SELECTOR, "input[data-md-component=search-query]"
        )
        await browser.call(query.click)
        await browser.call(query.send_keys, "trajectory")
        found = await browser.until(
            "Array.from(document.querySelectorAll('.md-search-result__item a'))"
            ".map(a => a.getAttribute('href'))",
            timeout_s=60,
        )
        assert (site / "trajectory.html").as_uri() in found, found
        urls = await browser.requested_urls()
        assert any(u.endswith("/assets/iframe-worker-shim.js") for u in urls)  # the log works
        assert [u for u in urls if urlsplit(u).scheme in NETWORK] == []
