"""Jobs and results in an embedded SQLite database (WAL).

All database work runs on one dedicated thread that owns the connection, so the event
loop never blocks on disk. A result is committed before `finish` returns, and only then
announced to trainers; the `results.cursor` column is the durable, gap-free completion
order that `GET /v1/results?after=` pages through.

The connection runs in autocommit mode (`isolation_level=None`), where `with db:` opens no
transaction: every write that spans more than one statement goes through `_transaction`,
which brackets it in `BEGIN IMMEDIATE ... COMMIT`. Without that, a SIGKILL between a
result's INSERT and its job's UPDATE leaves a result whose job looks unfinished, and the
next server runs the job again.

A result is stored as JSON every parser reads (`strict_json`): text no UTF-8 can encode (a
lone surrogate such as a tool call's `"\\ud800"` leaves behind) is written as the escape's
own characters, in messages, tool output, errors and metadata alike; token ids are untouched.

`PRAGMA user_version` is the schema version (`SCHEMA_VERSION`); `open` migrates an older
database's rows in one transaction.
"""

import asyncio
import contextlib
import functools
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentroll.server import result_columns
from agentroll.server.errors import ResultRejected, StoreError

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
    attempts      INTEGER NOT NULL DEFAULT 0
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
CREATE TABLE IF NOT EXISTS control (
    key         TEXT PRIMARY KEY,
    value_json  TEXT NOT NULL
);
"""
# Results committed by a server that wrote them without a transaction may have a job row that
# still looks unfinished: finish those jobs from their results instead of running them again.
_REPAIR = """
UPDATE jobs SET
    state = COALESCE(
        (SELECT json_extract(r.result_json, '$.status') FROM results r
         WHERE r.job_id = jobs.job_id), state),
    finished_at = COALESCE(finished_at, ?)
WHERE finished_at IS NULL AND job_id IN (SELECT job_id FROM results)
"""


_UNENCODABLE = re.compile("[\ud800-\udfff]")


def strict_json(value: Any) -> str:
    """`value` as compact JSON in valid UTF-8: a surrogate code unit (the only text a Python
    string holds that UTF-8 cannot encode) becomes the six characters of its escape, `\\udXXX`,
    so a strict parser (orjson, a trainer in another language) reads the whole page."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # only inside strings: JSON's own syntax is ASCII
        text = _UNENCODABLE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", text)
    return text


SCHEMA_VERSION = 1
"""1: `jobs.attempts` counts the attempts that started (entered INIT). 0 counted one per
restart for every unfinished job, whether it had started or still waited in the queue."""


def _migrate(db: sqlite3.Connection) -> None:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version >= SCHEMA_VERSION:
        return
    with _transaction(db):
        if version < 1:
            # Version 0 credited each unfinished job one attempt at admission and one more per
            # restart, started or not. Its interrupted run may never have started: that
            # attempt is taken back, the ones restarts counted are kept, so a job that kept
            # killing its server is still stopped at the limit.
            db.execute("UPDATE jobs SET attempts = MAX(attempts - 1, 0) WHERE finished_at IS NULL")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _backfill_fields(db: sqlite3.Connection) -> None:
    """The viewer's `result_fields` rows of results stored before the table existed."""
    (known,) = db.execute("SELECT COALESCE(MAX(cursor), 0) FROM result_fields").fetchone()
    db.execute(result_columns.BACKFILL.format(schema=""), (known,))


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One atomic write: everything inside commits together or not at all."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.rollback()
        raise
    db.commit()


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
            except sqlite3.OperationalError as exc:  # disk full, I/O error, locked
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
            db.executescript(result_columns.TABLE.format(schema=""))
            _migrate(db)
            with _transaction(db):
                db.execute(_REPAIR, (time.time(),))
                _backfill_fields(db)
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
                0,  # attempts: counted as each starts (`count_start`)
            )
            for j in jobs
        ]

        def insert(db: sqlite3.Connection) -> None:
            with _transaction(db):
                db.executemany(
                    "INSERT INTO jobs (job_id, request_json, request_hash, handler, group_id,"
                    " state, submitted_at, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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

        Idempotent: a job that already has a result keeps it, and its cursor is returned.
        Results that finish while a commit is under way are committed together in the next
        transaction (group commit): one fsync/WAL append and one thread hop for the batch.
        A result the database refuses fails alone (`ResultRejected`); the rest still commit.
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
                outcomes = await self._call(functools.partial(self._write_results, batch=batch))
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
            for (*_, done), outcome in zip(batch, outcomes, strict=True):
                if done.done():
                    continue
                if isinstance(outcome, BaseException):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

    def _write_results(
        self, db: sqlite3.Connection, *, batch: list[_PendingResult]
    ) -> list[int | ResultRejected]:
        """The whole batch in one transaction; if the database refuses any of it, each result
        alone, so one bad row never strands the others. Disk errors fail the whole batch."""
        try:
            return [*self._atomically(db, batch)]
        except sqlite3.OperationalError:
            raise
        except sqlite3.Error:
            pass  # find the offending result(s) below
        outcomes: list[int | ResultRejected] = []
        for entry in batch:
            try:
                outcomes += self._atomically(db, [entry])
            except sqlite3.OperationalError:
                raise
            except sqlite3.Error as exc:
                outcomes.append(ResultRejected(f"result of job {entry[0]} refused: {exc}"))
        return outcomes

    def _atomically(self, db: sqlite3.Connection, batch: list[_PendingResult]) -> list[int]:
        last = self._last_cursor
        try:
            with _transaction(db):
                return [self._write_one(db, job_id, st, result) for job_id, st, result, _ in batch]
        except BaseException:
            self._last_cursor = last  # nothing was committed: the cursors are free again
            raise

    def _write_one(
        self, db: sqlite3.Connection, job_id: str, state: str, result: dict[str, Any]
    ) -> int:
        """Inside a transaction: the job's existing cursor, or a new result at the next one.

        Only the store thread writes, so the cursor cannot race; it advances once the write
        is in the transaction, and a rollback puts it back (`_atomically`).
        """
        row = db.execute("SELECT cursor FROM results WHERE job_id = ?", (job_id,)).fetchone()
        if row is not None:
            result["cursor"] = int(row[0])
            return int(row[0])
        cursor = self._last_cursor + 1
        result["cursor"] = cursor
        db.execute(
            "INSERT INTO results (cursor, job_id, result_json) VALUES (?, ?, ?)",
            (cursor, job_id, strict_json(result)),
        )
        finished_at = time.time()
        fields = result_columns.fields_row(cursor, job_id, result, finished_at)
        db.execute(result_columns.INSERT, fields)
        db.execute(
            "UPDATE jobs SET state = ?, finished_at = ? WHERE job_id = ?",
            (state, finished_at, job_id),
        )
        self._last_cursor = cursor
        return cursor

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
            with _transaction(db):
                db.execute(
                    "INSERT OR REPLACE INTO backends (backend_id, spec_json) VALUES (?, ?)",
                    (backend_id, spec_json),
                )

        await self._call(write)

    async def delete_backend(self, backend_id: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                db.execute("DELETE FROM backends WHERE backend_id = ?", (backend_id,))

        await self._call(write)

    async def backends(self) -> list[str]:
        """Registered backend specs (JSON), in registration order."""

        def query(db: sqlite3.Connection) -> list[str]:
            return [str(r[0]) for r in db.execute("SELECT spec_json FROM backends ORDER BY rowid")]

        return await self._call(query)

    async def control(self) -> dict[str, Any]:
        """The server's persisted control state (policy version, pause), by key."""

        def query(db: sqlite3.Connection) -> dict[str, Any]:
            rows = db.execute("SELECT key, value_json FROM control ORDER BY key")
            return {str(k): json.loads(v) for k, v in rows}

        return await self._call(query)

    async def save_control(self, values: dict[str, Any]) -> None:
        """Set some control keys (the others keep their values), atomically."""
        rows = [(key, json.dumps(value)) for key, value in values.items()]

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                db.executemany(
                    "INSERT OR REPLACE INTO control (key, value_json) VALUES (?, ?)", rows
                )

        await self._call(write)

    async def count_start(self, job_id: str) -> None:
        """One more attempt of the job started (committed before its INIT begins, so a server
        killed during it still counts it)."""

        def update(db: sqlite3.Connection) -> None:
            db.execute("UPDATE jobs SET attempts = attempts + 1 WHERE job_id = ?", (job_id,))

        await self._call(update)
