"""The Grafana dashboard in deploy/ queries only metrics a live server exposes."""

import json
import re
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory

from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "agentroll.json"
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("", "_total"), "gauge": ("",)}


def exposed_series(exposition: str) -> set[str]:
    """Series names a scrape can return, from the `# TYPE` lines (even before any sample)."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\w+) (\w+)$", exposition, re.MULTILINE):
        names |= {name + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


async def scrape(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers=auth_headers(url)) as http:
        return (await http.get("/metrics")).text


async def test_dashboard_queries_only_exposed_metrics(agentroll_server: ServerFactory) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\bagentroll_\w+", target["expr"])
    }
    async with agentroll_server() as (server, _):
        exposition = await scrape(server.url)
    exposed = exposed_series(exposition)
    assert len(queried) >= 20
    assert queried <= exposed, f"not exposed by the server: {sorted(queried - exposed)}"
    assert {p["type"] for p in dashboard["panels"]} <= {"row", "timeseries", "stat"}
