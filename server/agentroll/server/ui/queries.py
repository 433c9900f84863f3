"""The viewer's SQL: filtered keyset pages of results, their reward statistics, one rollout,
one group. Every filter is one of the store's indexed expressions (`result_columns`)."""

import json
import sqlite3
from dataclasses import dataclass, fields
from typing import Any

from agentroll.server.result_columns import GROUP, HANDLER, OUTCOME, POLICY_VERSION, REWARD, TASK

PAGE_SIZE = 50
PASS_REWARD = 1.0
"""A sample passes at this reward or above: the curriculum's default `pass_threshold`."""
TASKS_SHOWN = 25
_SUMMARY_PATHS = (
    "$.handler",
    "$.group_id",
    "$.outcome",
    "$.reward",
    "$.num_turns",
    "$.timing.total_s",
    "$.segments[0].policy_version",
    "$.error.type",
)


@dataclass(frozen=True)
class Filters:
    """What the results page narrows to; empty fields filter nothing."""

    handler: str = ""
    task: str = ""
    group: str = ""
    outcome: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    policy_version: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition (always valid, `1` when nothing is set) and its parameters."""
        terms: list[str] = []
        params: list[Any] = []
        for value, expr in (
            (self.handler, HANDLER),
            (self.task, TASK),
            (self.group, GROUP),
            (self.outcome, OUTCOME),
        ):
            if value:
                terms.append(f"{expr} = ?")
                params.append(value)
        if self.reward_min is not None:
            terms.append(f"{REWARD} >= ?")
            params.append(self.reward_min)
        if self.reward_max is not None:
            terms.append(f"{REWARD} <= ?")
            params.append(self.reward_max)
        if self.policy_version is not None:
            terms.append(f"{POLICY_VERSION} = ?")
            params.append(self.policy_version)
        return (" AND ".join(terms) or "1"), params

    def query_items(self) -> dict[str, str]:
        """The filters set, as the results page's query parameters."""
        items = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: str(v) for k, v in items.items() if v not in ("", None)}


@dataclass(frozen=True)
class ResultRow:
    cursor: int
    job_id: str
    handler: str
    group_id: str | None
    outcome: str
    reward: float | None
    num_turns: int
    total_s: float
    policy_version: int | None
    error_type: str | None


@dataclass(frozen=True)
class Page:
    rows: list[ResultRow]
    older: int | None
    """The `before` cursor of the next (older) page; None on the last page."""


def results_page(db: sqlite3.Connection, filters: Filters, before: int | None) -> Page:
    """Newest first, `PAGE_SIZE` rows with a cursor below `before` (keyset: no OFFSET scan)."""
    where, params = filters.where()
    if before is not None:
        where += " AND cursor < ?"
        params.append(before)
    paths = ", ".join(f"'{p}'" for p in _SUMMARY_PATHS)
    sql = (
        f"SELECT cursor, job_id, json_extract(result_json, {paths}) FROM results "
        f"WHERE {where} ORDER BY cursor DESC LIMIT ?"
    )
    rows = [
        ResultRow(int(cursor), str(job_id), *json.loads(summary))
        for cursor, job_id, summary in db.execute(sql, [*params, PAGE_SIZE + 1])
    ]
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    return Page(rows, rows[-1].cursor if more else None)


def reward_counts(db: sqlite3.Connection, filters: Filters) -> dict[str, list[tuple[float, int]]]:
    """Per handler, how many results earned each distinct reward (for its histogram)."""
    where, params = filters.where()
    sql = (
        f"SELECT {HANDLER}, {REWARD}, COUNT(*) FROM results "
        f"WHERE {where} AND {REWARD} IS NOT NULL GROUP BY 1, 2"
    )
    counts: dict[str, list[tuple[float, int]]] = {}
    for handler, reward, n in db.execute(sql, params):
        counts.setdefault(str(handler), []).append((float(reward), int(n)))
    return counts


@dataclass(frozen=True)
class TaskPassRate:
    task: str
    samples: int
    passed: int
    mean_reward: float | None

    @property
    def rate(self) -> float:
        return self.passed / self.samples if self.samples else 0.0


def task_pass_rates(
    db: sqlite3.Connection, filters: Filters, limit: int = TASKS_SHOWN
) -> tuple[int, list[TaskPassRate]]:
    """(how many tasks, the `limit` hardest: lowest pass rate, most samples first)."""
    where, params = filters.where()
    grouped = (
        f"SELECT {TASK} AS task, COUNT(*) AS n, SUM(COALESCE({REWARD} >= ?, 0)) AS passed, "
        f"AVG({REWARD}) AS mean FROM results WHERE {where} AND {TASK} IS NOT NULL GROUP BY 1"
    )
    sql = (
        f"SELECT task, n, passed, mean, COUNT(*) OVER () FROM ({grouped}) "
        "ORDER BY CAST(passed AS REAL) / n, n DESC, task LIMIT ?"
    )
    rows = db.execute(sql, [PASS_REWARD, *params, limit]).fetchall()
    total = int(rows[0][4]) if rows else 0
    return total, [TaskPassRate(str(t), int(n), int(p), m) for t, n, p, m, _ in rows]


def choices(db: sqlite3.Connection, expr: str, limit: int = 200) -> list[str]:
    """The distinct values of an indexed field (for a filter's drop-down)."""
    sql = f"SELECT DISTINCT {expr} FROM results WHERE {expr} IS NOT NULL ORDER BY 1 LIMIT ?"
    return [str(v) for (v,) in db.execute(sql, (limit,))]


def handler_choices(db: sqlite3.Connection) -> list[str]:
    return choices(db, HANDLER)


def outcome_choices(db: sqlite3.Connection) -> list[str]:
    return choices(db, OUTCOME)


def result_json(db: sqlite3.Connection, job_id: str) -> str | None:
    row = db.execute("SELECT result_json FROM results WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def group_results(db: sqlite3.Connection, group_id: str, limit: int = 64) -> list[dict[str, Any]]:
    """A group's results (at most `limit`), in completion order."""
    sql = f"SELECT result_json FROM results WHERE {GROUP} = ? ORDER BY cursor LIMIT ?"
    return [json.loads(raw) for (raw,) in db.execute(sql, (group_id, limit))]


@dataclass(frozen=True)
class StoredState:
    """What a database says about its server when no server is live: outcome counts, the
    results of the last minute of its run, the persisted backends and control state."""

    outcomes: dict[str, int]
    results: int
    last_minute: int
    backends: list[dict[str, Any]]
    control: dict[str, Any]
    jobs_by_state: dict[str, int]


def stored_state(db: sqlite3.Connection) -> StoredState:
    def rows(sql: str, *params: Any) -> list[Any]:
        return db.execute(sql, params).fetchall()

    outcomes = {
        str(o): int(n) for o, n in rows(f"SELECT {OUTCOME}, COUNT(*) FROM results GROUP BY 1")
    }
    [(last,)] = rows("SELECT MAX(finished_at) FROM jobs")
    [(recent,)] = rows("SELECT COUNT(*) FROM jobs WHERE finished_at > ?", (last or 0.0) - 60.0)
    return StoredState(
        outcomes,
        sum(outcomes.values()),
        int(recent or 0),
        [json.loads(s) for (s,) in rows("SELECT spec_json FROM backends ORDER BY rowid")],
        {str(k): json.loads(v) for k, v in rows("SELECT key, value_json FROM control")},
        {str(s): int(n) for s, n in rows("SELECT state, COUNT(*) FROM jobs GROUP BY 1")},
    )
