"""The viewer's reader: a query past its time is interrupted and said so, never left running;
a file that is not a result store is refused with what it is."""

import sqlite3
from pathlib import Path

import pytest

from agentroll.server.store import JobStore
from agentroll.server.ui.source import ResultsReader, ViewerUnavailable, open_read_only

ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"


async def test_a_query_past_its_time_is_interrupted(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "r.db")
    await store.open()
    await store.close()
    reader = ResultsReader(tmp_path / "r.db", timeout_s=0.3)
    try:
        # Interrupted by SQLite at the deadline (the await's own backstop would be a
        # TimeoutError, later).
        with pytest.raises(ViewerUnavailable, match=r"query took over 0\.3 s"):
            await reader.query(lambda db: db.execute(ENDLESS).fetchone())
        rows = await reader.query(lambda db: db.execute("SELECT COUNT(*) FROM results").fetchone())
        assert rows == (0,)  # the reader still answers
    finally:
        await reader.close()


def test_a_file_that_is_no_result_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ViewerUnavailable, match="no database at"):
        open_read_only(tmp_path / "missing.db")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ViewerUnavailable, match="is not an agentroll result database"):
        open_read_only(other)
