"""The rollout viewer on a 100,000-result database: p95 time of the results page (newest,
filtered, deep in the pages) and of a 30-turn rollout page; target 200 ms each.

The database is written synthetically through the store's own write path (`JobStore.finish`,
which fills the viewer's indexed `result_fields`) in a temporary directory. The pages are
served by `agentroll view`'s app and timed from request to last byte in process, through the
app's ASGI interface: the server's time, no TCP delay counted. A few minutes in all, most of
it writing the database.

    .venv/bin/python benchmarks/viewer.py [--results 100000] [--requests 40] [--db PATH]
"""

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from agentroll.server.store import JobStore
from agentroll.server.ui.app import create_view_app
from agentroll.testing.viewer_data import fill_store, known_trajectory, store_trajectories

TARGET_MS = 200.0
LONG_ROLLOUT = "rollout-30-turns"


async def build(db: Path, results: int) -> None:
    began = time.monotonic()
    await fill_store(db, results - 1)
    store = JobStore(db)
    await store.open()
    long = known_trajectory(
        LONG_ROLLOUT, group_id="long", turns=30, sampled=150, observed=60, handler="swe"
    )
    await store_trajectories(store, [long])
    await store.close()
    size = (await asyncio.to_thread(os.path.getsize, db)) / 2**20
    print(
        f"database: {results} results, {size:.0f} MiB, written in {time.monotonic() - began:.0f} s"
    )


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[94]


async def measure(db: Path, results: int, requests: int) -> bool:
    pages = {
        "results, newest": "/ui/results",
        "results, handler=code": "/ui/results?handler=code",
        "results, outcome + reward range": "/ui/results?outcome=ok&reward_min=0.5&reward_max=1",
        "results, policy version, deep page": f"/ui/results?policy_version=3&before={results // 3}",
        "results, one group": "/ui/results?group=group-01234",
        f"rollout, 30 turns ({30 * 210} tokens)": f"/ui/rollout/{LONG_ROLLOUT}",
        "group of 4": "/ui/group/group-01234",
    }
    app = create_view_app(db, "bench")
    ok = True
    transport = httpx.ASGITransport(app=app)
    headers = {"authorization": "Bearer bench"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://viewer", headers=headers) as http,
    ):
        print(f"{'page':<44}{'p50 ms':>10}{'p95 ms':>10}   target p95 <= {TARGET_MS:.0f} ms")
        for name, path in pages.items():
            (await http.get(path)).raise_for_status()  # warm: first read of its pages
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                (await http.get(path)).raise_for_status()
                times.append(1000 * (time.perf_counter() - began))
            high = p95(times)
            ok &= high <= TARGET_MS
            verdict = "meets" if high <= TARGET_MS else "MISSES"
            print(f"{name:<44}{statistics.median(times):>10.1f}{high:>10.1f}   {verdict}")
    return ok


async def main(results: int, requests: int, db: Path | None) -> int:
    if db is not None:  # kept there, built on the first run
        if not await asyncio.to_thread(db.exists):
            await build(db, results)
        return 0 if await measure(db, results, requests) else 1
    with tempfile.TemporaryDirectory(prefix="agentroll-viewer-bench-") as workdir:
        db = Path(workdir) / "results.db"
        await build(db, results)
        return 0 if await measure(db, results, requests) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--db", type=Path, help="build the database here once and keep it")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.results, args.requests, args.db)))
