import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from agentroll.server.errors import StoreError
from agentroll.server.store import SCHEMA_VERSION, JobStore, NewJob


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
    assert found["j1"].attempts == 0  # admitted, never started
    await store.count_start("j1")
    row = await store.get_job("j1")
    assert row is not None and row.attempts == 1
    await store.close()


async def test_an_older_database_counts_attempts_that_started(tmp_path: Path) -> None:
    """Schema 0 credited every unfinished job an attempt at admission and one per restart:
    opened by this server, the unfinished ones lose the credit their interrupted run got
    (it may never have started); the restarts already counted stay; finished jobs keep theirs."""
    path = tmp_path / "s.db"
    store = JobStore(path)
    await store.open()
    await store.insert_jobs([_job(1), _job(2), _job(3)])
    await store.finish("j3", "ok", {"job_id": "j3", "status": "ok"})
    await store.close()
    with sqlite3.connect(path) as db:  # as a schema-0 server left it
        db.execute("PRAGMA user_version = 0")
        db.executemany(
            "UPDATE jobs SET attempts = ? WHERE job_id = ?", [(1, "j1"), (4, "j2"), (2, "j3")]
        )
    for _ in range(2):  # migrated once: opening again changes nothing
        store = JobStore(path)
        await store.open()
        rows = {j: await store.get_job(j) for j in ("j1", "j2", "j3")}
        assert {j: r.attempts for j, r in rows.items() if r is not None} == {
            "j1": 0,
            "j2": 3,
            "j3": 2,
        }
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 1


def _fail_updates_of(db_path: Path, job_id: str) -> None:
    """A trigger that makes the `jobs` update of one job fail, as a crash or a bad row would."""
    with sqlite3.connect(db_path) as db:
        db.execute(
            f"CREATE TRIGGER fail_{job_id} BEFORE UPDATE OF finished_at ON jobs "
            f"WHEN NEW.job_id = '{job_id}' BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )


async def test_a_result_and_its_job_state_commit_together(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.insert_jobs([_job(i) for i in range(3)])
    _fail_updates_of(tmp_path / "s.db", "j1")
    outcomes = await asyncio.gather(
        *(store.finish(f"j{i}", "completed", {"job_id": f"j{i}"}) for i in range(3)),
        return_exceptions=True,
    )
    # One failing write never strands the others of its group commit...
    assert [isinstance(o, int) for o in outcomes] == [True, False, True]
    assert isinstance(outcomes[1], StoreError)
    # ...and the failed one left neither a result nor a half-finished job behind.
    assert await store.result("j1") is None
    assert [r.job_id for r in await store.unfinished()] == ["j1"]
    page = await store.results_after(0, 10)
    assert [c for c, _ in page] == [1, 2]  # gap-free: no cursor was burnt by the failure
    await store.close()


async def test_committing_a_result_twice_returns_the_first_cursor(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.insert_jobs([_job(0), _job(1)])
    first = await store.finish("j0", "completed", {"job_id": "j0", "reward": 1.0})
    again = await store.finish("j0", "failed", {"job_id": "j0", "reward": None})
    later = await store.finish("j1", "completed", {"job_id": "j1"})
    assert (first, again, later) == (1, 1, 2)
    raw = await store.result("j0")
    assert raw is not None and json.loads(raw)["reward"] == 1.0  # the first result stands
    row = await store.get_job("j0")
    assert row is not None and row.state == "completed"
    await store.close()


async def test_open_repairs_a_result_whose_job_was_left_unfinished(tmp_path: Path) -> None:
    """A database written without transactions can hold a result whose job looks live."""
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.insert_jobs([_job(0), _job(1)])
    await store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute(
            "INSERT INTO results (cursor, job_id, result_json) VALUES (1, 'j0', ?)",
            (json.dumps({"job_id": "j0", "status": "completed", "cursor": 1}),),
        )
    reopened = JobStore(tmp_path / "s.db")
    await reopened.open()
    assert [r.job_id for r in await reopened.unfinished()] == ["j1"]  # j0 is not run again
    row = await reopened.get_job("j0")
    assert row is not None and row.state == "completed" and row.finished_at is not None
    await reopened.close()


async def test_a_multi_row_submission_is_all_or_nothing(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    await store.insert_jobs([_job(1)])
    with pytest.raises(sqlite3.IntegrityError):
        await store.insert_jobs([_job(0), _job(1), _job(2)])  # j1 exists: the batch fails
    assert list(await store.existing(["j0", "j1", "j2"])) == ["j1"]
    await store.close()


async def test_control_state_survives_reopen(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "s.db")
    await store.open()
    assert await store.control() == {}
    await store.save_control({"policy_version": 7, "paused": True, "pause_mode": "keep"})
    await store.save_control({"paused": False})
    await store.close()
    reopened = JobStore(tmp_path / "s.db")
    await reopened.open()
    assert await reopened.control() == {"policy_version": 7, "paused": False, "pause_mode": "keep"}
    await reopened.close()
