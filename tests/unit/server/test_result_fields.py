"""The store keeps the viewer's `result_fields` row of each result in the same transaction,
fills the rows of results stored before the table existed when it opens, and a read-only
viewer of such an older database builds the same rows in memory."""

import sqlite3
from pathlib import Path

from agentroll.server.store import JobStore
from agentroll.server.ui import queries
from agentroll.server.ui.source import ResultsReader
from agentroll.testing.viewer_data import known_trajectory, store_trajectories

COLUMNS = "cursor, job_id, handler, group_id, task, outcome, reward, policy_version, num_turns"


async def _written(db: Path) -> list[tuple[object, ...]]:
    store = JobStore(db)
    await store.open()
    await store_trajectories(
        store,
        [
            known_trajectory("a", handler="code", group_id="g1", reward=1.0, policy_version=3),
            known_trajectory("b", group_id="g1", reward=None, outcome="infra_error"),
            known_trajectory("c", group_id=None, task_id="task-\ud800", turns=2),
        ],
    )
    await store.close()
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT {COLUMNS} FROM result_fields ORDER BY cursor").fetchall()


def _forget_fields(db: Path) -> None:
    """What a database written before the table existed looks like."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE result_fields")


async def test_each_result_gets_its_row_and_an_older_store_is_filled_on_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    rows = await _written(db)
    assert rows == [
        (1, "a", "code", "g1", "g1", "ok", 1.0, 3, 3),
        (2, "b", "math", "g1", "g1", "infra_error", None, 0, 3),
        (3, "c", "math", None, "task-\\ud800", "ok", 1.0, 0, 2),  # as the stored JSON has it
    ]
    _forget_fields(db)
    store = JobStore(db)
    await store.open()
    await store.close()
    with sqlite3.connect(db) as conn:
        assert (
            conn.execute(f"SELECT {COLUMNS} FROM result_fields ORDER BY cursor").fetchall() == rows
        )


async def test_a_read_only_viewer_of_an_older_database_builds_the_rows_in_memory(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    await _written(db)
    _forget_fields(db)
    before = db.read_bytes()
    reader = ResultsReader(db)
    try:
        page = await reader.query(lambda c: queries.results_page(c, queries.Filters(), None))
        code = await reader.query(
            lambda c: queries.results_page(c, queries.Filters(handler="code"), None)
        )
    finally:
        await reader.close()
    assert [r.job_id for r in page.rows] == ["c", "b", "a"]
    assert [r.job_id for r in code.rows] == ["a"]
    assert db.read_bytes() == before
    with sqlite3.connect(db) as conn:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "result_fields" not in tables
