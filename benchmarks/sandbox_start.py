"""Sandbox start-up benchmark: figures printed beside their targets.

    .venv/bin/python benchmarks/sandbox_start.py [--runtime bwrap|local|fake-apptainer]

* cold start: start request -> action server ready (target: bwrap median <= 250 ms)
* warm pool: time to hand out a pre-started sandbox (target <= 20 ms)
* memory per idle sandbox (proportional set size of all its processes; reported)
* 200 concurrent sandboxes start and stop (target: no errors)
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentroll.runtime import BwrapConfig, LocalConfig, SandboxSpec, SingularityConfig, procs
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.warm_pool import WarmPool


def build(kind: str, state: Path) -> BaseRuntime:
    if kind == "bwrap":
        return BwrapConfig(state_dir=state).build()
    if kind == "local":
        return LocalConfig(state_dir=state, enabled=True).build()
    from agentroll.testing.fake_apptainer import write_shim

    return SingularityConfig(
        state_dir=state, binary=str(write_shim(state)), default_image=Path("/"),
        host_python=True, cli_env={"FAKE_APPTAINER_DIR": str(state / "fake")},
    ).build()  # fmt: skip


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def report(name: str, value: str, target: str, ok: bool | None) -> None:
    verdict = "" if ok is None else ("OK" if ok else "MISSED")
    print(f"{name:<42} {value:>14}   target {target:<12} {verdict}")


async def cold(rt: BaseRuntime, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        sb = await rt.start(SandboxSpec(), timeout=60)
        times.append(time.perf_counter() - t)
        await sb.stop()
    return times


async def warm(rt: BaseRuntime, n: int) -> list[float]:
    pool = WarmPool(rt, size=2)
    spec = SandboxSpec()
    times = []
    for _ in range(n):
        await pool.warm(spec)
        t = time.perf_counter()
        sb = await pool.acquire(spec, timeout=60)
        times.append(time.perf_counter() - t)
        await sb.stop()
    await pool.close()
    return times


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def idle_memory(rt: BaseRuntime, n: int) -> float:
    sandboxes = await asyncio.gather(*(rt.start(SandboxSpec(), timeout=60) for _ in range(n)))
    await asyncio.sleep(1.0)
    all_procs = procs.scan()
    total = sum(
        pss_kib(p)
        for sb in sandboxes
        for p in procs.select(all_procs, sb.id, pidns=sb.pidns.inode if sb.pidns else None)
    )
    await asyncio.gather(*(sb.stop() for sb in sandboxes))
    return total / n / 1024


async def concurrent(rt: BaseRuntime, n: int) -> tuple[int, int, float]:
    t = time.perf_counter()
    started = await asyncio.gather(
        *(rt.start(SandboxSpec(), timeout=300) for _ in range(n)), return_exceptions=True
    )
    ok = [sb for sb in started if not isinstance(sb, BaseException)]
    start_errors = n - len(ok)
    for err in {repr(e) for e in started if isinstance(e, BaseException)}:
        print("  start error:", err[:200])
    stopped = await asyncio.gather(*(sb.stop() for sb in ok), return_exceptions=True)
    stop_errors = sum(isinstance(r, BaseException) for r in stopped)
    return start_errors, stop_errors, time.perf_counter() - t


async def main(kind: str, n: int, concurrency: int) -> None:
    state = Path(tempfile.mkdtemp(prefix="ar-bench-", dir="/tmp"))
    rt = build(kind, state)
    try:
        await cold(rt, 2)  # page cache and imports, not counted
        c = await cold(rt, n)
        w = await warm(rt, n)
        mem = await idle_memory(rt, 10)
        start_errors, stop_errors, took = await concurrent(rt, concurrency)
    finally:
        await rt.close()
        shutil.rmtree(state, ignore_errors=True)
    print(f"runtime: {kind}, {n} samples")
    med = statistics.median(c)
    report(
        "cold start -> ready, median",
        ms(med),
        "<= 250 ms",
        med <= 0.25 if kind == "bwrap" else None,
    )
    report("cold start -> ready, p90", ms(sorted(c)[int(0.9 * (n - 1))]), "-", None)
    wmed = statistics.median(w)
    report("warm pool hand-out, median", ms(wmed), "<= 20 ms", wmed <= 0.02)
    report("memory per idle sandbox (PSS)", f"{mem:8.1f} MiB", "report", None)
    report(f"{concurrency} concurrent: start errors", str(start_errors), "0", start_errors == 0)
    report(f"{concurrency} concurrent: stop errors", str(stop_errors), "0", stop_errors == 0)
    report(f"{concurrency} concurrent: start+stop wall time", f"{took:8.1f} s", "report", None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="bwrap", choices=["bwrap", "local", "fake-apptainer"])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.runtime, args.samples, args.concurrent))
