"""The viewer's pages, all read-only GETs under `/ui` (the auth middleware guards them).

Pages are rendered on the server (jinja2, autoescaped: rollout text is policy-written); the
live page refreshes one fragment with a few lines of script. Nothing is fetched from
anywhere but this server (the Content-Security-Policy says so to the browser too).
"""

import json
import math
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader

from agentroll.server.ui import queries, tokens
from agentroll.server.ui.render import grpo_advantages, histogram_svg
from agentroll.server.ui.source import ViewerUnavailable
from agentroll.server.ui.viewer import Viewer
from agentroll.trainer_clients.exports.messages import content_text, tool_calls

T = TypeVar("T")
router = APIRouter(prefix="/ui", include_in_schema=False)
_templates = Environment(
    loader=PackageLoader("agentroll.server.ui", "templates"), autoescape=True, auto_reload=False
)
_SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; script-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_STATIC = {
    name: (resources.files("agentroll.server.ui").joinpath("static", name).read_bytes(), kind)
    for name, kind in (("viewer.css", "text/css"), ("viewer.js", "text/javascript"))
}
"""The viewer's own stylesheet and script, read once: nothing else is served or fetched."""


def _viewer(request: Request) -> Viewer:
    viewer: Viewer = request.app.state.viewer
    return viewer


def _page(name: str, **context: Any) -> HTMLResponse:
    html = _templates.get_template(name).render(**context)
    return HTMLResponse(html, headers=_SECURITY_HEADERS)


async def _read(viewer: Viewer, fn: Callable[..., T], *args: Any) -> T:
    try:
        return await viewer.reader.query(lambda db: fn(db, *args))
    except ViewerUnavailable as exc:
        raise HTTPException(503, str(exc)) from exc


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in _STATIC:
        raise HTTPException(404, "no such file")
    body, kind = _STATIC[name]
    return Response(body, media_type=kind, headers=_SECURITY_HEADERS)


async def _live_context(viewer: Viewer) -> dict[str, Any]:
    stored = await _read(viewer, queries.stored_state)
    status = None
    if viewer.status is not None:
        status = viewer.status().model_dump(mode="json")
    return {"viewer": viewer, "stored": stored, "status": status}


@router.get("", response_class=HTMLResponse)
async def live_page(request: Request) -> HTMLResponse:
    viewer = _viewer(request)
    return _page("live.html", **await _live_context(viewer), page="live")


@router.get("/live/fragment", response_class=HTMLResponse)
async def live_fragment(request: Request) -> HTMLResponse:
    return _page("live_fragment.html", **await _live_context(_viewer(request)))


SQLITE_MAX_INT = 2**63 - 1
"""SQLite's integers are 64-bit: a larger one in a query is refused by the driver."""


def _number(value: str, kind: type[float] | type[int], name: str) -> Any:
    if not value.strip():
        return None
    try:
        number = kind(value)
    except ValueError:
        raise HTTPException(400, f"{name} must be a number, not {value!r}") from None
    if not math.isfinite(number):
        raise HTTPException(400, f"{name} must be finite")
    if kind is int and abs(number) > SQLITE_MAX_INT:
        raise HTTPException(400, f"{name} is too large")
    return number


@router.get("/results", response_class=HTMLResponse)
async def results_page(
    request: Request,
    handler: str = "",
    task: str = "",
    group: str = "",
    outcome: str = "",
    reward_min: str = "",
    reward_max: str = "",
    policy_version: str = "",
    before: str = "",
) -> HTMLResponse:
    viewer = _viewer(request)
    filters = queries.Filters(
        handler,
        task,
        group,
        outcome,
        _number(reward_min, float, "reward_min"),
        _number(reward_max, float, "reward_max"),
        _number(policy_version, int, "policy_version"),
    )
    cursor = _number(before, int, "before")
    page = await _read(viewer, queries.results_page, filters, cursor)
    counts = await _read(viewer, queries.reward_counts, filters)
    tasks_total, tasks = await _read(viewer, queries.task_pass_rates, filters)
    handlers = await _read(viewer, queries.handler_choices)
    outcomes = await _read(viewer, queries.outcome_choices)
    items = filters.query_items()
    older = None if page.older is None else "?" + urlencode({**items, "before": page.older})
    return _page(
        "results.html",
        page="results",
        viewer=viewer,
        filters=filters,
        rows=page.rows,
        older=older,
        newest="?" + urlencode(items) if cursor is not None else None,
        histograms=[(h, histogram_svg(h, c)) for h, c in sorted(counts.items())],
        tasks=tasks,
        tasks_total=tasks_total,
        pass_reward=queries.PASS_REWARD,
        handlers=handlers,
        outcomes=outcomes,
    )


async def _result(viewer: Viewer, job_id: str) -> str:
    raw = await _read(viewer, queries.result_json, job_id)
    if raw is None:
        raise HTTPException(404, f"no result for job {job_id!r}")
    return str(raw)


@router.get("/rollout/{job_id}/export.json")
async def export_rollout(request: Request, job_id: str) -> Response:
    raw = await _result(_viewer(request), job_id)
    disposition = {"content-disposition": 'attachment; filename="trajectory.json"'}
    return Response(raw, media_type="application/json", headers=_SECURITY_HEADERS | disposition)


@router.get("/rollout/{job_id}", response_class=HTMLResponse)
async def rollout_page(request: Request, job_id: str) -> HTMLResponse:
    viewer = _viewer(request)
    # Parsed on the reader's thread: a policy sets how long its trajectory is.
    result = await _read(viewer, queries.result, job_id)
    if result is None:
        raise HTTPException(404, f"no result for job {job_id!r}")
    decoder = tokens.TokenDecoder(await _read(viewer, queries.backend_specs))
    chains = tokens.render_chains(tokens.chains_of(result), decoder)
    return _page(
        "rollout.html",
        page="rollout",
        viewer=viewer,
        r=result,
        chains=chains,
        messages=[_message(m) for m in result.get("messages", [])],
        pretty=_pretty,
    )


TEXT_SHOWN = 100_000
"""Characters of one JSON field (grader info, metadata) a rollout page shows: metadata holds
every side chain's token ids, whose length the policy sets."""


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) <= TEXT_SHOWN:
        return text
    left_out = len(text) - TEXT_SHOWN
    return f"{text[:TEXT_SHOWN]}\n… {left_out:,} characters not shown: export.json holds them all"


def _message(message: Any) -> dict[str, Any]:
    """A message's role, text and tool calls, whatever shape the harness gave it (read as
    every export reads it)."""
    message = message if isinstance(message, dict) else {"content": message}
    calls = [{"name": c.name, "arguments": c.arguments_text()} for c in tool_calls(message)]
    name = message.get("name") or message.get("tool_call_id")
    return {
        "role": str(message.get("role", "?")),
        "content": content_text(message.get("content")),
        "tool_calls": calls,
        "name": None if name is None else str(name),
    }


@router.get("/group/{group_id}", response_class=HTMLResponse)
async def group_page(request: Request, group_id: str) -> HTMLResponse:
    viewer = _viewer(request)
    results = await _read(viewer, queries.group_results, group_id)
    if not results:
        raise HTTPException(404, f"no results in group {group_id!r}")
    advantages = grpo_advantages([r.get("reward") for r in results])
    last_replies = [_last_reply(r) for r in results]
    return _page(
        "group.html",
        page="group",
        viewer=viewer,
        group_id=group_id,
        members=list(zip(results, advantages, last_replies, strict=True)),
    )


def _last_reply(result: dict[str, Any]) -> str:
    for message in reversed(result.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return str(_message(message)["content"])[-1500:]
    return ""
