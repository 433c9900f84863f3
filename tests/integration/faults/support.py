"""Shared by the fault and restart tests: real server processes, their results, their
sandboxes, read from outside (the way an operator or a trainer would see them)."""

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from agentroll.runtime import procs
from agentroll.trainer_clients import RolloutClient, ServerUnavailable


def wait_ready(url: str, timeout_s: float = 30, token: str | None = None) -> RolloutClient:
    """A client for a server process that has just been started (or restarted)."""
    client = RolloutClient(url, timeout_s=30, token=token)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.status()
            return client
        except ServerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def drain(client: RolloutClient, expected: int, timeout_s: float = 120) -> list[dict[str, Any]]:
    """Follow the results cursor from 0 until `expected` results (or the timeout)."""
    seen: list[dict[str, Any]] = []
    cursor, deadline = 0, time.monotonic() + timeout_s
    while len(seen) < expected and time.monotonic() < deadline:
        page = client.results(after=cursor, limit=1000, wait=2)
        seen += [t.model_dump() for t in page.results]
        cursor = page.next_cursor
    return seen


def sandbox_pids(ids: set[str] | None = None) -> set[int]:
    """Processes of agentroll sandboxes on this machine (found by their marker): of the
    sandboxes named in `ids`, or of any when None."""
    return {p.pid for p in procs.scan() if p.sandbox_id and (ids is None or p.sandbox_id in ids)}


def wait_until(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def leases(state_dir: Path) -> list[dict[str, Any]]:
    """The lease files of live sandboxes (owner, pid, pgid, label)."""
    folder = state_dir / "leases"
    if not folder.exists():
        return []
    found = []
    for path in folder.glob("*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # written or removed just now
    return found


def lease_ids(state_dir: Path) -> set[str]:
    return {lease["sandbox_id"] for lease in leases(state_dir)}


def stored_jobs(db: Path) -> dict[str, tuple[str, str | None]]:
    """job id -> (state, error type of its stored result) read straight from the store."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT j.job_id, j.state, r.result_json FROM jobs j"
            " LEFT JOIN results r ON r.job_id = j.job_id"
        ).fetchall()
    out: dict[str, tuple[str, str | None]] = {}
    for job_id, state, raw in rows:
        error = json.loads(raw).get("error") if raw else None
        out[job_id] = (state, error["type"] if error else None)
    return out
