"""Shared by the fault and restart tests: real server processes and their results, read from
outside (the way an operator or a trainer would see them; their sandboxes:
`agentroll.testing.sandboxes`)."""

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

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


def wait_until(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


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


def math_jobs(n: int, prefix: str, group_size: int) -> list[dict[str, Any]]:
    """`n` bundled math jobs (`PREFIX000`, ...) in GRPO groups of `group_size`, seeded."""
    from agentroll.handlers.builtin.math import load_math_tasks

    tasks = load_math_tasks()
    return [
        {
            "job_id": f"{prefix}{i:03d}",
            "group_id": f"g{i // group_size}",
            "handler": "math",
            "instance": tasks[i % len(tasks)].instance(),
            "sampling": {"seed": i, "max_tokens": 256},
        }
        for i in range(n)
    ]
