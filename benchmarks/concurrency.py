"""2,000 rollouts in flight at once against a backend with 1 s of latency per generation.

Run pool 2,000, so every rollout can hold its RUN worker concurrently: the ideal wall time
is one generation latency. Reports completion time against that ideal, and the server's
memory per in-flight rollout (peak RSS during the run minus RSS before it).
Targets (issue 2): <= 1.3x ideal, <= 150 KB server memory per in-flight rollout.

    .venv/bin/python benchmarks/concurrency.py [--jobs 2000] [--latency 1.0]
"""

import argparse
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from _common import cpu_seconds, report, rss_bytes
from pipeline_throughput import jobs

from agentroll.server.launch import agentroll_process
from agentroll.trainer_clients import RolloutClient


class PeakRSS(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    n = args.jobs
    env = {
        "AGENTROLL_POOLS__INIT": str(n),
        "AGENTROLL_POOLS__RUN": str(n),
        "AGENTROLL_POOLS__EVAL": "256",
        "AGENTROLL_POOLS__READY_BUFFER": str(n),
        "AGENTROLL_LOG_LEVEL": "warning",
    }
    llm_args = ["scripted-llm", "--port", "0", "--latency-s", str(args.latency)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            agentroll_process(llm_args, work, "llm") as llm,
            agentroll_process(
                ["serve", "--port", "0", "--db", str(work / "a.db")], work, "server", env=env
            ) as server,
            RolloutClient(server.url, token=server.token, timeout_s=120) as client,
        ):
            client.add_backend({"id": "llm", "base_url": llm.url, "max_concurrency": 100_000})
            client.submit(jobs(50, "warmup"))
            cursor = 0
            while cursor < 50:
                cursor = client.results(after=cursor, limit=100, wait=5).next_cursor
            base_rss = rss_bytes(server.pid)
            sampler = PeakRSS(server.pid)
            sampler.start()
            batch = jobs(n, "bench")
            cpu0 = {"server": cpu_seconds(server.pid), "backend": cpu_seconds(llm.pid)}
            started = time.perf_counter()
            client.submit(batch)
            outcomes: Counter[str] = Counter()
            while sum(outcomes.values()) < n:
                page = client.results(after=cursor, limit=1000, wait=10)
                outcomes.update(t.outcome.value for t in page.results)
                cursor = page.next_cursor
            elapsed = time.perf_counter() - started
            cpu = {"server": cpu_seconds(server.pid), "backend": cpu_seconds(llm.pid)}
            cpu = {k: v - cpu0[k] for k, v in cpu.items()}
            sampler.stop.set()
            sampler.join()
    if set(outcomes) != {"ok"}:
        raise SystemExit(f"not every rollout succeeded: {dict(outcomes)}")
    ratio = elapsed / args.latency
    per_rollout_kb = (sampler.peak - base_rss) / n / 1024
    mib = 2**20
    print(f"concurrency: {n} single-turn rollouts in flight, {args.latency:g} s LLM latency")
    print(f"  wall time {elapsed:.2f} s (ideal {args.latency:.2f} s)")
    print(f"  server RSS {base_rss / mib:.0f} -> {sampler.peak / mib:.0f} MiB")
    print(f"  CPU in the run: server {cpu['server']:.2f} s, backend {cpu['backend']:.2f} s")
    report("completion time / ideal", ratio, "x", "<= 1.3", ratio <= 1.3)
    report(
        "server memory per in-flight rollout", per_rollout_kb, "KB", "<= 150", per_rollout_kb <= 150
    )


if __name__ == "__main__":
    main()
