"""The viewer's own read-only connection to a result database.

Opened with `mode=ro`: the viewer cannot write, whether it runs inside a server (beside the
store's writer; WAL lets readers and the writer go on at once) or over a stored database
(`agentroll view`). Each query runs on the reader's one thread and is interrupted past
`timeout_s`, so a slow page never holds the event loop or a connection.
"""

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from agentroll.server import result_columns
from agentroll.server.errors import ViewerUnavailable

T = TypeVar("T")
QUERY_TIMEOUT_S = 10.0


def open_read_only(path: Path) -> sqlite3.Connection:
    """`path` opened read-only; `ViewerUnavailable` if it is not an agentroll result store."""
    if not path.is_file():
        raise ViewerUnavailable(f"no database at {path}")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    db = sqlite3.connect(uri, uri=True, check_same_thread=False)
    try:
        db.execute("SELECT cursor, job_id, result_json FROM results LIMIT 0")
        if not _has_fields(db):  # written before the store kept them: build them in memory
            db.executescript(result_columns.TABLE.format(schema="temp."))
            db.execute(result_columns.BACKFILL.format(schema="temp."), (0,))
        db.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        db.close()
        raise ViewerUnavailable(f"{path} is not an agentroll result database: {exc}") from exc
    return db


def _has_fields(db: sqlite3.Connection) -> bool:
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'result_fields'"
    return db.execute(sql).fetchone() is not None


class ResultsReader:
    """Read-only queries over one result database, one at a time, each bounded in time."""

    def __init__(self, path: Path, *, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentroll-viewer")
        self._db: sqlite3.Connection | None = None

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        deadline = time.monotonic() + self._timeout_s

        def run() -> T:
            if self._db is None:
                self._db = open_read_only(self.path)
            db = self._db
            # Interrupts the statement once past the deadline (checked every 10k VM steps).
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                return fn(db)
            except sqlite3.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ViewerUnavailable(f"query took over {self._timeout_s:g} s") from exc
                raise ViewerUnavailable(f"database unavailable: {exc}") from exc
            finally:
                db.set_progress_handler(None, 0)

        future = asyncio.get_running_loop().run_in_executor(self._executor, run)
        async with asyncio.timeout(self._timeout_s + 5.0):  # the handler ends it before this
            return await future

    async def close(self) -> None:
        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        async with asyncio.timeout(self._timeout_s + 5.0):  # after any query in flight
            await asyncio.get_running_loop().run_in_executor(self._executor, disconnect)
        self._executor.shutdown(wait=False)
