"""Repeated SIGKILLs while a batch runs, with the disk under write pressure: nothing is lost,
nothing is delivered twice, the cursor has no gap."""

import os
import random
import threading
import time
from pathlib import Path

import pytest
from tests.integration.faults.support import drain, math_jobs, stored_jobs, wait_ready

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome

pytestmark = pytest.mark.e2e

JOBS = 240
KILLS = 8
MAX_REQUEUES = 3
PRESSURE_FILE_BYTES = 64 * 1024 * 1024


class DiskPressure:
    """Writes and fsyncs a file beside the database until stopped (bounded in size)."""

    def __init__(self, folder: Path) -> None:
        self._path = folder / "pressure.bin"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.fsyncs = 0

    def _run(self) -> None:
        chunk = os.urandom(1024 * 1024)
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            offset = 0
            while not self._stop.is_set():
                os.pwrite(fd, chunk, offset)
                os.fsync(fd)
                self.fsyncs += 1
                offset = (offset + len(chunk)) % PRESSURE_FILE_BYTES
        finally:
            os.close(fd)
            self._path.unlink(missing_ok=True)

    def __enter__(self) -> "DiskPressure":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_repeated_sigkills_under_disk_pressure_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    rng = random.Random(7)
    db = str(tmp_path / "agentroll.db")
    env = {
        "AGENTROLL_POOLS__RUN": "32",
        "AGENTROLL_POOLS__INIT": "32",
        "AGENTROLL_ON_RESTART": "requeue",
        "AGENTROLL_MAX_REQUEUES": str(MAX_REQUEUES),
        "AGENTROLL_DB_SYNCHRONOUS": "FULL",
    }
    seen_by_trainer: dict[str, int] = {}
    with (
        DiskPressure(tmp_path) as pressure,
        agentroll_process(
            ["scripted-llm", "--port", "0", "--latency-s", "0.1"], tmp_path, "llm"
        ) as llm,
    ):
        for life in range(KILLS + 1):
            with agentroll_process(
                ["serve", "--port", "0", "--db", db], tmp_path, f"server{life}", env=env
            ) as server:
                client = wait_ready(server.url)
                if life == 0:
                    client.add_backend({"id": "llm", "base_url": llm.url})
                    client.submit(math_jobs(JOBS, "d", 8))
                if life == KILLS:
                    results = drain(client, JOBS, timeout_s=300)
                    client.close()
                    break
                # Let it work a random while, reading results as a trainer would, then kill it.
                until = time.monotonic() + rng.uniform(0.3, 1.5)
                while time.monotonic() < until:
                    page = client.results(after=0, limit=1000)
                    seen_by_trainer.update({t.job_id: t.cursor for t in page.results})
                    time.sleep(0.05)
                server.kill()
                client.close()
        assert pressure.fsyncs > 0

    ids = sorted(r["job_id"] for r in results)
    assert ids == sorted(j["job_id"] for j in math_jobs(JOBS, "d", 8))  # each exactly once
    assert [r["cursor"] for r in results] == list(range(1, JOBS + 1))  # gap-free cursor
    by_id = {r["job_id"]: r for r in results}
    for job_id, cursor in seen_by_trainer.items():  # delivered results never move or change
        assert by_id[job_id]["cursor"] == cursor
    for r in results:
        if r["outcome"] == Outcome.infra_error:
            assert r["error"]["type"] == "requeue_limit" and r["reward"] is None
        else:
            assert r["outcome"] == Outcome.ok and r["reward"] is not None
    stored = stored_jobs(Path(db))
    assert all(state in ("completed", "failed") for state, _ in stored.values())
