"""The store's disk fills up (a small tmpfs under the database, filled by a test file):
submissions are refused with a 503 `store_unavailable`, what was stored stays readable,
results that finish meanwhile wait in memory and are committed once space returns."""

import asyncio
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.faults.fault_handlers import fault_registry, staged_job

from agentroll.server.schema import Outcome
from agentroll.trainer_clients.auth import auth_headers

pytestmark = pytest.mark.integration

DISK = "8m"  # the store never reaches SQLite's 4 MB WAL auto-checkpoint: writes must grow files


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK mounted over tmp_path (where the server fixture puts its database)."""
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mount.stderr.strip()}")
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "-l", str(tmp_path)], check=False)


def fill(path: Path) -> int:
    """Write until the disk is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]  # top up to the last byte


async def test_full_disk_refuses_submissions_keeps_results_and_recovers(
    agentroll_server: ServerFactory, small_disk: Path
) -> None:
    gate = small_disk / "gate"
    gate.touch()
    stored = [staged_job(f"s{i:02d}", pad=20_000) for i in range(20)]
    held = [staged_job(f"h{i}", pad=100_000, hold=["run"], gate=str(gate)) for i in range(10)]
    async with agentroll_server(registry=fault_registry()) as (server, client):
        await client.submit(stored)
        before = await client.wait_for([j["job_id"] for j in stored], 60)
        await client.submit(held)
        filler = small_disk / "filler"
        assert await asyncio.to_thread(fill, filler) > 0

        async with httpx.AsyncClient(
            base_url=server.url, timeout=30, headers=auth_headers(server.url)
        ) as http:
            late = [staged_job(f"late{i}", pad=50_000) for i in range(5)]
            refused = await http.post("/v1/jobs", json={"jobs": late})
            assert refused.status_code == 503
            assert refused.json()["error"]["type"] == "store_unavailable"
            assert "full" in refused.json()["error"]["message"]
            assert refused.headers["retry-after"]

            gate.unlink()  # the held jobs finish while nothing can be written
            await asyncio.sleep(2.0)
            page = await client.results(after=0, limit=1000)
            assert [t.job_id for t in page.results] == [j["job_id"] for j in stored]
            assert [t.model_dump() for t in page.results] == [
                before[j["job_id"]].model_dump() for j in stored
            ]  # everything stored is still served, unchanged
            status = await client.status()
            assert status.jobs_by_state  # not lost: still live, waiting to be committed
            assert (await http.get("/v1/jobs/late0")).status_code == 404  # nothing admitted

            await asyncio.to_thread(filler.unlink)  # space returns
            finished = await client.wait_for([j["job_id"] for j in held], 30)
            assert {t.outcome for t in finished.values()} == {Outcome.ok}
            accepted = await http.post("/v1/jobs", json={"jobs": late})
            assert accepted.status_code == 200, accepted.text
        await client.wait_for([j["job_id"] for j in late], 30)
        everything = await client.results(after=0, limit=1000)
    ids = [t.job_id for t in everything.results]
    assert len(ids) == len(set(ids)) == len(stored) + len(held) + len(late)
    assert [t.cursor for t in everything.results] == list(range(1, len(ids) + 1))
