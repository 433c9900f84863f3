"""The viewer's SQL: filtered keyset pages of results, their reward statistics, one rollout,
one group. Filters and statistics read the indexed `result_fields` table, never result JSON."""

import json
import sqlite3
from dataclasses import dataclass, fields
from typing import Any

PAGE_SIZE = 50
PASS_REWARD = 1.0
"""A sample passes at this reward or above: the curriculum's default `pass_threshold`."""
TASKS_SHOWN = 25


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
        for value, column in (
            (self.handler, "handler"),
            (self.task, "task"),
            (self.group, "group_id"),
            (self.outcome, "outcome"),
        ):
            if value:
                terms.append(f"{column} = ?")
                params.append(value)
        if self.reward_min is not None:
            terms.append("reward >= ?")
            params.append(self.reward_min)
        if self.reward_max is not None:
            terms.append("reward <= ?")
            params.append(self.reward_max)
        if self.policy_version is not None:
            terms.append("policy_version = ?")
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
    sql = (
        "SELECT cursor, job_id, handler, group_id, outcome, reward, num_turns, total_s, "
        f"policy_version, error_type FROM result_fields WHERE {where} "
        "ORDER BY cursor DESC LIMIT ?"
    )
    rows = [ResultRow(*row) for row in db.execute(sql, [*params, PAGE_SIZE + 1])]
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    return Page(rows, rows[-1].cursor if more else None)


def reward_counts(db: sqlite3.Connection, filters: Filters) -> dict[str, list[tuple[float, int]]]:
    """Per handler, how many results earned each distinct reward (for its histogram)."""
    where, params = filters.where()
    sql = (
        "SELECT handler, reward, COUNT(*) FROM result_fields "
        f"WHERE {where} AND reward IS NOT NULL GROUP BY 1, 2"
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
        "SELECT task, COUNT(*) AS n, SUM(COALESCE(reward >= ?, 0)) AS passed, "
        f"AVG(reward) AS mean FROM result_fields WHERE {where} AND task IS NOT NULL GROUP BY 1"
    )
    sql = (
        f"SELECT task, n, passed, mean, COUNT(*) OVER () FROM ({grouped}) "
        "ORDER BY CAST(passed AS REAL) / n, n DESC, task LIMIT ?"
    )
    rows = db.execute(sql, [PASS_REWARD, *params, limit]).fetchall()
    total = int(rows[0][4]) if rows else 0
    return total, [TaskPassRate(str(t), int(n), int(p), m) for t, n, p, m, _ in rows]


def choices(db: sqlite3.Connection, column: str, limit: int = 200) -> list[str]:
    """The distinct values of an indexed field (for a filter's drop-down)."""
    sql = (
        f"SELECT DISTINCT {column} FROM result_fields WHERE {column} IS NOT NULL ORDER BY 1 LIMIT ?"
    )
    return [str(v) for (v,) in db.execute(sql, (limit,))]


def handler_choices(db: sqlite3.Connection) -> list[str]:
    return choices(db, "handler")


def outcome_choices(db: sqlite3.Connection) -> list[str]:
    return choices(db, "outcome")


def result_json(db: sqlite3.Connection, job_id: str) -> str | None:
    row = db.execute("SELECT result_json FROM results WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def group_results(db: sqlite3.Connection, group_id: str, limit: int = 64) -> list[dict[str, Any]]:
    """A group's results (at most `limit`), in completion order."""
    sql = (
        "SELECT r.result_json FROM result_fields f JOIN results r ON r.cursor = f.cursor "
        "WHERE f.group_id = ? ORDER BY f.cursor LIMIT ?"
    )
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


def backend_specs(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """The backends the server registered (their specs name their tokenizers)."""
    rows = db.execute("SELECT spec_json FROM backends ORDER BY rowid")
    return [json.loads(spec) for (spec,) in rows]


def stored_state(db: sqlite3.Connection) -> StoredState:
    def rows(sql: str, *params: Any) -> list[Any]:
        return db.execute(sql, params).fetchall()

    outcomes = {
        str(o): int(n) for o, n in rows("SELECT outcome, COUNT(*) FROM result_fields GROUP BY 1")
    }
    [(last,)] = rows("SELECT MAX(finished_at) FROM result_fields")
    recent = "SELECT COUNT(*) FROM result_fields WHERE finished_at > ?"
    [(recent_n,)] = rows(recent, (last or 0.0) - 60.0)
    return StoredState(
        outcomes,
        sum(outcomes.values()),
        int(recent_n or 0),
        backend_specs(db),
        {str(k): json.loads(v) for k, v in rows("SELECT key, value_json FROM control")},
        {str(s): int(n) for s, n in rows("SELECT state, COUNT(*) FROM jobs GROUP BY 1")},
    )
