"""The LLM layer under load: 4,000 concurrent generations across 4 scripted backends.

Each generation goes through agentroll's token session (routing, the generation gate,
the keep-alive HTTP client) to one of 4 `agentroll scripted-llm` processes with 1 s of
latency. Reports wall time against the ideal (one latency), agentroll's CPU per generation
(this process), and how soon a `wait` pause returns after the last in-flight call ends.
Targets (issue 3): <= 10% over ideal wall time, <= 1 ms CPU per generation, pause barrier
within 50 ms of the last in-flight request finishing.

    .venv/bin/python benchmarks/llm_concurrency.py [--generations 4000] [--latency 1.0]
"""

import argparse
import asyncio
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import cpu_seconds, report

from agentroll.server.launch import agentroll_process
from agentroll.server.llm import BackendPool, HTTPClient, TokenSession
from agentroll.server.llm.gate import GenerationGate
from agentroll.server.schema import BackendSpec

PROMPT = [{"role": "user", "content": "Repeat after me: the quick brown fox"}]


def session(pool: BackendPool, gate: GenerationGate) -> TokenSession:
    return TokenSession(
        pool,
        sampling={"temperature": 1.0, "max_tokens": 32},
        max_response_tokens=1024,
        max_context_tokens=None,
        gate=gate,
        request_timeout_s=60,
    )


async def one(pool: BackendPool, gate: GenerationGate, finished: list[float]) -> None:
    s = session(pool, gate)
    await s.start(PROMPT)
    await s.generate()
    finished.append(time.monotonic())


async def measure(urls: list[str], pids: list[int], n: int, latency: float) -> None:
    http = HTTPClient(timeout_s=120)
    pool = BackendPool(http)
    for i, url in enumerate(urls):
        pool.add(BackendSpec(id=f"b{i}", base_url=url, max_concurrency=100_000))  # type: ignore[arg-type]
    gate = GenerationGate()
    warm: list[float] = []
    await asyncio.gather(*(one(pool, gate, warm) for _ in range(200)))  # connections, caches

    finished: list[float] = []
    backend_cpu0 = sum(cpu_seconds(pid) for pid in pids)
    cpu0, started = os.times(), time.monotonic()
    await asyncio.gather(*(one(pool, gate, finished) for _ in range(n)))
    elapsed, cpu1 = time.monotonic() - started, os.times()
    ours = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    cpu_ms = ours * 1000 / n
    backends_cpu = sum(cpu_seconds(pid) for pid in pids) - backend_cpu0
    floor = (ours + backends_cpu) / (os.cpu_count() or 1)

    # The barrier: pause while a wave is in flight; it returns once the last call is done.
    finished.clear()
    wave = [asyncio.create_task(one(pool, gate, finished)) for _ in range(n)]
    await asyncio.sleep(latency / 2)
    gate.close("wait")
    await gate.wait_quiet(60)
    returned = time.monotonic()
    barrier_ms = (returned - max(finished)) * 1000 if finished else float("nan")
    gate.open(1)
    await asyncio.gather(*wave)
    await http.close()

    ratio = elapsed / latency
    print(
        f"llm_concurrency: {n} concurrent generations, {len(urls)} backends, {latency:g} s latency"
    )
    print(f"  wall {elapsed:.2f} s (ideal {latency:.2f} s)")
    print(
        f"  CPU: agentroll {ours:.2f} s + scripted backends {backends_cpu:.2f} s on "
        f"{os.cpu_count()} cores: the machine alone needs >= {floor:.2f} s"
    )
    report("wall time over ideal", (ratio - 1) * 100, "%", "<= 10", ratio <= 1.10)
    report("agentroll CPU per generation", cpu_ms, "ms", "<= 1", cpu_ms <= 1.0)
    report("pause returns after last in-flight", barrier_ms, "ms", "<= 50", barrier_ms <= 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generations", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--backends", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        llm_args = ["scripted-llm", "--port", "0", "--latency-s", str(args.latency)]
        procs = [
            stack.enter_context(agentroll_process(llm_args, Path(tmp), f"llm{i}"))
            for i in range(args.backends)
        ]
        asyncio.run(
            measure([p.url for p in procs], [p.pid for p in procs], args.generations, args.latency)
        )


if __name__ == "__main__":
    main()
