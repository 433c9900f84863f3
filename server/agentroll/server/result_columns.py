"""`result_fields`: the fields of each stored result that the viewer filters, sorts and counts
by, as plain indexed columns beside its JSON.

The store writes a result's row here in the same transaction as the result (`fields_row`),
so pages and statistics never parse result JSON: a 100,000-result database answers a
filtered page from its indexes. A database written before this table existed gets it filled
from the stored JSON when a server opens it (`BACKFILL`), and a read-only viewer builds the
same in a temporary table of its own.
"""

from typing import Any

FIELDS = (
    "cursor",
    "job_id",
    "handler",
    "group_id",
    "task",
    "outcome",
    "reward",
    "policy_version",
    "num_turns",
    "total_s",
    "error_type",
    "finished_at",
)
TABLE = """
CREATE TABLE IF NOT EXISTS {schema}result_fields (
    cursor          INTEGER PRIMARY KEY,
    job_id          TEXT NOT NULL,
    handler         TEXT,
    group_id        TEXT,
    task            TEXT,
    outcome         TEXT,
    reward          REAL,
    policy_version  INTEGER,
    num_turns       INTEGER,
    total_s         REAL,
    error_type      TEXT,
    finished_at     REAL
);
CREATE INDEX IF NOT EXISTS {schema}fields_by_handler ON result_fields (handler, reward);
CREATE INDEX IF NOT EXISTS {schema}fields_by_task ON result_fields (task, reward);
CREATE INDEX IF NOT EXISTS {schema}fields_by_group ON result_fields (group_id);
CREATE INDEX IF NOT EXISTS {schema}fields_by_outcome ON result_fields (outcome);
CREATE INDEX IF NOT EXISTS {schema}fields_by_reward ON result_fields (reward);
CREATE INDEX IF NOT EXISTS {schema}fields_by_version ON result_fields (policy_version);
CREATE INDEX IF NOT EXISTS {schema}fields_by_time ON result_fields (finished_at);
"""
"""`schema` is empty for the store's own table, `temp.` for a read-only viewer's copy."""
INSERT = (
    f"INSERT OR REPLACE INTO result_fields ({', '.join(FIELDS)}) "
    f"VALUES ({', '.join('?' * len(FIELDS))})"
)
BACKFILL = f"""
INSERT OR IGNORE INTO {{schema}}result_fields ({", ".join(FIELDS)})
SELECT cursor, job_id,
    json_extract(result_json, '$.handler'),
    json_extract(result_json, '$.group_id'),
    COALESCE(json_extract(result_json, '$.metadata.task_id'),
             json_extract(result_json, '$.group_id')),
    json_extract(result_json, '$.outcome'),
    json_extract(result_json, '$.reward'),
    json_extract(result_json, '$.segments[0].policy_version'),
    COALESCE(json_extract(result_json, '$.num_turns'), 0),
    json_extract(result_json, '$.timing.total_s'),
    json_extract(result_json, '$.error.type'),
    (SELECT finished_at FROM jobs WHERE jobs.job_id = results.job_id)
FROM results WHERE cursor > ?
"""
"""Rows for the results that have none (newer than the cursor given)."""


def task_of(result: dict[str, Any]) -> str | None:
    """The task a rollout is a sample of: its request's `metadata.task_id` when the trainer
    set one, else its group (a group is n samples of one task)."""
    task = (result.get("metadata") or {}).get("task_id")
    return str(task) if task is not None else result.get("group_id")


def _text(value: Any) -> str | None:
    """Text as the stored JSON holds it: a lone surrogate (no UTF-8 encodes it) as its escape."""
    if value is None:
        return None
    return str(value).encode("utf-8", "backslashreplace").decode()


def fields_row(
    cursor: int, job_id: str, result: dict[str, Any], finished_at: float
) -> tuple[Any, ...]:
    """The `result_fields` row of a result about to be stored."""
    segments = result.get("segments") or []
    error = result.get("error") or {}
    return (
        cursor,
        _text(job_id),
        _text(result.get("handler")),
        _text(result.get("group_id")),
        _text(task_of(result)),
        _text(result.get("outcome")),
        result.get("reward"),
        segments[0].get("policy_version") if segments else None,
        int(result.get("num_turns") or 0),
        (result.get("timing") or {}).get("total_s"),
        _text(error.get("type")),
        finished_at,
    )
