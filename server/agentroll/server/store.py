"""Jobs and results in an embedded SQLite database (WAL).

All database work runs on one dedicated thread that owns the connection, so the event
loop never blocks on disk. A result is committed before `finish` returns, and only then
announced to trainers; the `results.cursor` column is the durable, gap-free-per-commit
completion order that `GET /v1/results?after=` pages through.
"""

import asyncio
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
_PendingResult = tuple[str, str, dict[str, Any], "asyncio.Future[int]"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    request_json  TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    handler       TEXT NOT NULL,
    group_id      TEXT,
    state         TEXT NOT NULL,
    submitted_at  REAL NOT NULL,
    finished_at   REAL,
    attempts      INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (finished_at) WHERE finished_at IS NULL;
CREATE TABLE IF NOT EXISTS backends (
    backend_id  TEXT PRIMARY KEY,
    spec_json   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    cursor       INTEGER PRIMARY KEY,
    job_id       TEXT NOT NULL UNIQUE REFERENCES jobs (job_id),
    result_json  TEXT NOT NULL
);
"""


class StoreError(RuntimeError):
    """The store cannot take writes (disk full, I/O error); nothing committed is lost."""


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    request_json: str
    request_hash: str
    handler: str
    group_id: str | None
    state: str
    submitted_at: float
    finished_at: float | None
    attempts: int


@dataclass(frozen=True, slots=True)
class NewJob:
    job_id: str
    request_json: str
    request_hash: str
    handler: str
    group_id: str | None
    submitted_at: float


class JobStore:
    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "NORMAL",
        on_commit: Callable[[float], None] | None = None,
    ) -> None:
        """`on_commit(seconds)` is told how long each group commit of results took."""
        self._path = path
        self._on_commit = on_commit
        self._synchronous = synchronous
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentroll-store")
        self._db: sqlite3.Connection | None = None
        self._last_cursor = 0
        self._pending: list[_PendingResult] = []
        self._flusher: asyncio.Task[None] | None = None

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._db is None:
                raise StoreError("job store is closed")
            try:
                return fn(self._db)
            except sqlite3.OperationalError as exc:
                if self._db.in_transaction:
                    self._db.rollback()
                raise StoreError(f"job store unavailable: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    @property
    def closed(self) -> bool:
        return self._db is None

    async def open(self) -> None:
        def connect() -> None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            (self._last_cursor,) = db.execute(
                "SELECT COALESCE(MAX(cursor), 0) FROM results"
            ).fetchone()
            self._db = db

        await asyncio.get_running_loop().run_in_executor(self._executor, connect)

    async def close(self) -> None:
        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, disconnect)
        self._executor.shutdown(wait=True)

    async def insert_jobs(self, jobs: list[NewJob]) -> None:
        rows = [
            (
                j.job_id,
                j.request_json,
                j.request_hash,
                j.handler,
                j.group_id,
                "queued",
                j.submitted_at,
            )
            for j in jobs
        ]

        def insert(db: sqlite3.Connection) -> None:
            with db:
                db.executemany(
                    "INSERT INTO jobs (job_id, request_json, request_hash, handler, group_id,"
                    " state, submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

        await self._call(insert)

    async def existing(self, job_ids: Iterable[str]) -> dict[str, JobRow]:
        ids = list(job_ids)

        def query(db: sqlite3.Connection) -> dict[str, JobRow]:
            found: dict[str, JobRow] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in db.execute(f"SELECT * FROM jobs WHERE job_id IN ({marks})", chunk):
                    found[row[0]] = JobRow(*row)
            return found

        return await self._call(query) if ids else {}

    async def get_job(self, job_id: str) -> JobRow | None:
        return (await self.existing([job_id])).get(job_id)

    async def finish(self, job_id: str, state: str, result: dict[str, Any]) -> int:
        """Commit a job's final result; returns its cursor. The result's `cursor` is filled in.

        Results that finish while a commit is under way are committed together in the next
        transaction (group commit): one fsync/WAL append and one thread hop for the batch.
        """
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((job_id, state, result, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="agentroll-store-flush")
        return await done

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            began = time.monotonic()
            try:
                cursors = await self._call(functools.partial(self._write_results, batch=batch))
            except BaseException as exc:
                for *_, done in batch:
                    if not done.done():
                        done.set_exception(
                            exc if isinstance(exc, Exception) else StoreError("store closed")
                        )
                if not isinstance(exc, Exception):
                    raise
                continue
            if self._on_commit is not None:
                self._on_commit(time.monotonic() - began)
            for (*_, done), cursor in zip(batch, cursors, strict=True):
                if not done.done():
                    done.set_result(cursor)

    def _write_results(self, db: sqlite3.Connection, *, batch: list[_PendingResult]) -> list[int]:
        # Only the store thread writes, so the counter cannot race; it advances on commit only.
        now, cursor = time.time(), self._last_cursor
        rows, updates = [], []
        for job_id, state, result, _ in batch:
            cursor += 1
            result["cursor"] = cursor
            rows.append((cursor, job_id, json.dumps(result, separators=(",", ":"))))
            updates.append((state, now, job_id))
        with db:
            db.executemany(
                "INSERT INTO results (cursor, job_id, result_json) VALUES (?, ?, ?)", rows
            )
            db.executemany("UPDATE jobs SET state = ?, finished_at = ? WHERE job_id = ?", updates)
        self._last_cursor = cursor
        return [row[0] for row in rows]

    async def result(self, job_id: str) -> str | None:
        def query(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT result_json FROM results WHERE job_id = ?", (job_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._call(query)

    async def results_after(self, cursor: int, limit: int) -> list[tuple[int, str]]:
        def query(db: sqlite3.Connection) -> list[tuple[int, str]]:
            rows = db.execute(
                "SELECT cursor, result_json FROM results WHERE cursor > ? ORDER BY cursor LIMIT ?",
                (cursor, limit),
            )
            return [(int(c), str(r)) for c, r in rows]

        return await self._call(query)

    @property
    def last_cursor(self) -> int:
        """Cursor of the newest committed result."""
        return self._last_cursor

    async def unfinished(self) -> list[JobRow]:
        """Jobs that were admitted but never finished, in submission order."""

        def query(db: sqlite3.Connection) -> list[JobRow]:
            rows = db.execute("SELECT * FROM jobs WHERE finished_at IS NULL ORDER BY rowid")
            return [JobRow(*row) for row in rows]

        return await self._call(query)

    async def save_backend(self, backend_id: str, spec_json: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO backends (backend_id, spec_json) VALUES (?, ?)",
                    (backend_id, spec_json),
                )

        await self._call(write)

    async def delete_backend(self, backend_id: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("DELETE FROM backends WHERE backend_id = ?", (backend_id,))

        await self._call(write)

    async def backends(self) -> list[str]:
        """Registered backend specs (JSON), in registration order."""

        def query(db: sqlite3.Connection) -> list[str]:
            return [str(r[0]) for r in db.execute("SELECT spec_json FROM backends ORDER BY rowid")]

        return await self._call(query)

    async def count_attempt(self, job_ids: list[str]) -> None:
        def update(db: sqlite3.Connection) -> None:
            with db:
                db.executemany(
                    "UPDATE jobs SET attempts = attempts + 1, state = 'queued' WHERE job_id = ?",
                    [(j,) for j in job_ids],
                )

        await self._call(update)
