"""`agentroll export` over a store of rollouts whose length the policy set: it streams, one
stored result at a time, however many it exports (`--all` of a training run's store)."""

import tracemalloc
from pathlib import Path

import pytest

from agentroll.server.export import stored_results
from agentroll.server.store import JobStore
from agentroll.testing.viewer_data import known_trajectory, store_trajectories

pytestmark = [pytest.mark.redteam, pytest.mark.timeout(300)]


async def test_export_holds_one_stored_result_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = JobStore(db, synchronous="OFF")
    await store.open()
    huge = [known_trajectory(f"j{i}", turns=40, sampled=4_000) for i in range(8)]
    await store_trajectories(store, huge)
    await store.close()
    tracemalloc.start()
    try:
        rows = stored_results(db, [])
        job_id, first, _ = next(rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert job_id == "j0"
    assert peak < 2 * len(first) + 1024 * 1024  # not all eight results at once
    assert [j for j, _, _ in rows] == [f"j{i}" for i in range(1, 8)]  # the rest, in order
    # The control: naming jobs still checks they exist before anything is exported.
    with pytest.raises(ValueError, match="no stored result for job"):
        next(stored_results(db, ["j1", "nope"]))
    assert [j for j, _, _ in stored_results(db, ["j5", "j2"])] == ["j2", "j5"]
