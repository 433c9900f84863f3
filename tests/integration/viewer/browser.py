"""Headless Chromium for the viewer's browser tests (Debian's `chromium` and `chromium-driver`,
installed by scripts/install-system-deps.sh), driven by selenium from a worker thread so the
servers in the test's event loop keep answering."""

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

T = TypeVar("T")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMEDRIVER is None or CHROMIUM is None,
    reason="make installs chromium and chromium-driver (scripts/install-system-deps.sh)",
)


class Browser:
    """One headless Chromium; every call runs off the event loop."""

    def __init__(self, driver: Any, screenshots: Path) -> None:
        self.driver = driver
        self.screenshots = screenshots

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), 60)

    async def get(self, url: str) -> None:
        await self.call(self.driver.get, url)

    async def js(self, script: str, *args: Any) -> Any:
        return await self.call(self.driver.execute_script, script, *args)

    async def until(self, script: str, timeout_s: float = 30.0) -> Any:
        """Polls `script` (a JS expression) until it is truthy; returns its value."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        while True:
            value = await self.js(f"return {script};")
            if value:
                return value
            if loop.time() > give_up:
                raise AssertionError(f"never true in the page: {script}")
            await asyncio.sleep(0.2)

    async def screenshot(self, name: str) -> Path:
        path = self.screenshots / f"{name}.png"
        await self.call(self.driver.save_screenshot, str(path))
        assert path.stat().st_size > 1000
        return path

    async def requested_urls(self) -> list[str]:
        """Every URL the browser asked for since the last call (its network log)."""
        entries = await self.call(self.driver.get_log, "performance")
        urls = []
        for entry in entries:
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    async def assert_only_from(self, origin: str) -> None:
        """No request went over the network anywhere but `origin` (the viewer's own server
        on loopback); the browser's own `chrome://` pages and `data:` never leave it."""
        urls = await self.requested_urls()
        network = [u for u in urls if urlsplit(u).scheme in ("http", "https", "ws", "wss")]
        assert any(u.startswith(f"{origin}/ui/static/") for u in network)  # the log works
        strays = [u for u in network if _origin(u) != origin]
        assert strays == [], strays


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@asynccontextmanager
async def chromium(workdir: Path) -> AsyncIterator[Browser]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root here; the page is our own
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={workdir / 'profile'}",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=os.devnull)
    screenshots = workdir / "screenshots"
    screenshots.mkdir(parents=True, exist_ok=True)
    driver = await asyncio.wait_for(
        asyncio.to_thread(webdriver.Chrome, options=options, service=service), 120
    )
    try:
        yield Browser(driver, screenshots)
    finally:
        await asyncio.wait_for(asyncio.to_thread(driver.quit), 60)
