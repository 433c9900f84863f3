import json
import sqlite3
from pathlib import Path

from agentroll.server.store import JobStore, NewJob


def _job(i: int) -> NewJob:
    return NewJob(f"j{i}", json.dumps({"i": i}), f"h{i}", "math", "g", 1.0 + i)


async def test_results_survive_reopen_with_cursor_order(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = JobStore(db)
    await store.open()
    await store.insert_jobs([_job(i) for i in range(3)])
    c2 = await store.finish("j2", "completed", {"job_id": "j2"})
    c0 = await store.finish("j0", "failed", {"job_id": "j0"})
    assert (c2, c0) == (1, 2)
    await store.close()

    reopened = JobStore(db)
    await reopened.open()
    assert reopened.last_cursor == 2
    page = await reopened.results_after(0, 10)
    assert [json.loads(r)["job_id"] for _, r in page] == ["j2", "j0"]
    assert [json.loads(r)["cursor"] for _, r in page] == [1, 2]
    assert await reopened.results_after(2, 10) == []
    assert [r.job_id for r in await reopened.unfinished()] == ["j1"]
    assert (await reopened.finish("j1", "completed", {})) == 3
    await reopened.close()


async def test_database_is_in_wal_mode(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_existing_and_attempt_counting(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.insert_jobs([_job(1)])
    found = await store.existing(["j1", "nope"])
    assert list(found) == ["j1"] and found["j1"].request_hash == "h1"
    await store.count_attempt(["j1"])
    row = await store.get_job("j1")
    assert row is not None and row.attempts == 2
    await store.close()
