"""GRPO groups through 1, 2 and 4 agentroll servers, and failover when one dies.

Every process (this client, the scripted vLLM backend, N servers) shares this machine's
cores, so groups/s cannot grow past what the cores allow: more servers only help while one
server leaves cores idle. Scaling efficiency is (groups/s with N servers) / (N x groups/s
with 1 server); the ceiling is the best efficiency the idle cores allow,
min(N, cores / cores busy with one server) / N.
Then: SIGKILL one of three servers mid-batch, and time the failover.
Targets (issue 6): every group completes; its jobs are resubmitted <= 5 s after the health
check notices the death.

    .venv/bin/python benchmarks/multi_server.py [--groups 60] [--group-size 8]
"""

import argparse
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import report

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.launch import Proc, agentroll_process
from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import GroupCollector, GroupSpec, ServerPool

ENV = {
    "AGENTROLL_LOG_LEVEL": "warning",
    "AGENTROLL_POOLS__RUN": "64",
    "AGENTROLL_POOLS__INIT": "32",
}


def specs(groups: int, size: int, tag: str) -> list[GroupSpec]:
    tasks = load_math_tasks()
    sampling = {"temperature": 1.0, "max_tokens": 256, "seed": 1}
    return [
        GroupSpec(
            f"{tag}-g{i}",
            JobRequest(
                handler="math", instance=tasks[i % len(tasks)].instance(), sampling=sampling
            ),
            size,
        )
        for i in range(groups)
    ]


def servers(stack: ExitStack, workdir: Path, count: int, tag: str) -> list[Proc]:
    return [
        stack.enter_context(
            agentroll_process(
                ["serve", "--port", "0", "--db", str(workdir / f"{tag}-{i}.db")],
                workdir,
                f"{tag}-{i}",
                **ENV,
            )
        )
        for i in range(count)
    ]


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def throughput(workdir: Path, llm: str, count: int, groups: int, size: int) -> tuple[float, float]:
    """(groups/s, cores busy on average) for `count` servers."""
    with ExitStack() as stack:
        procs = servers(stack, workdir, count, f"n{count}")
        with ServerPool([p.url for p in procs], token=procs[0].token) as pool:
            pool.add_backend({"id": "llm", "base_url": llm})
            with GroupCollector(pool) as collector:
                collector.collect(specs(4, size, f"warm{count}"), timeout_s=120)  # warm-up
                started, (busy0, total0) = time.monotonic(), cpu_times()
                done = collector.collect(specs(groups, size, f"n{count}"), timeout_s=600)
                elapsed, (busy1, total1) = time.monotonic() - started, cpu_times()
        assert all(g.valid for g in done), [g.reason for g in done if not g.valid]
    cores = (os.cpu_count() or 1) * (busy1 - busy0) / max(total1 - total0, 1)
    return len(done) / elapsed, cores


def failover(workdir: Path, llm: str, groups: int, size: int) -> None:
    with ExitStack() as stack:
        procs = servers(stack, workdir, 3, "fo")
        # dead after 5 s of failed health checks (the default, 30 s, rides out longer stalls)
        with ServerPool(
            [p.url for p in procs], token=procs[0].token, health_interval_s=1.0, dead_after_s=5.0
        ) as pool:
            pool.add_backend({"id": "llm", "base_url": llm})
            with GroupCollector(pool) as collector:
                collector.submit_groups(specs(groups, size, "fo"))
                done, killed_at = [], 0.0
                for group in collector.groups(timeout_s=120):
                    done.append(group)
                    if len(done) == groups // 5:
                        procs[1].kill()
                        killed_at = time.monotonic()
                finished_at = time.monotonic()
            [event] = pool.failovers
    valid = sum(g.valid for g in done)
    assert event.resubmitted_at is not None
    print(f"\nfailover: SIGKILL 1 of 3 servers after {groups // 5} of {groups} groups")
    report("groups completed (valid)", valid, "groups", f"= {groups}", valid == groups)
    report("death -> noticed by the pool", event.noticed_at - killed_at, "s", "(info)", True)
    report("jobs moved", event.jobs, "jobs", "(info)", True)
    resubmit = event.resubmit_s or 0.0
    report("noticed -> all resubmitted", resubmit, "s", "<= 5 s", resubmit <= 5.0)
    report("death -> last group done", finished_at - killed_at, "s", "(info)", True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=60)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.0, help="scripted LLM latency, s")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="agentroll-bench-ms-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        llm = stack.enter_context(
            agentroll_process(
                ["scripted-llm", "--port", "0", "--latency-s", str(args.latency)], workdir, "llm"
            )
        ).url
        print(
            f"{args.groups} groups x {args.group_size} math rollouts per run, {cores} cores, "
            f"scripted LLM latency {args.latency:g} s"
        )
        runs = {n: throughput(workdir, llm, n, args.groups, args.group_size) for n in (1, 2, 4)}
        base, base_busy = runs[1]
        head = ("servers", "groups/s", "rollouts/s", "cores busy", "efficiency", "ceiling")
        print("\n  " + " ".join(f"{h:>10}" for h in head))
        for n, (rate, busy) in runs.items():
            # the best N servers can do: scale until the cores one server left idle are full
            ceiling = min(n, cores / max(base_busy, 1e-9)) / n
            cells = [str(n), f"{rate:.2f}", f"{rate * args.group_size:.1f}", f"{busy:.2f}"]
            cells += [f"{rate / (n * base):.0%}", f"{ceiling:.0%}"]
            print("  " + " ".join(f"{c:>10}" for c in cells))
        print(
            f"  (one server already keeps {base_busy:.2f} of {cores} cores busy: client, scripted "
            "LLM and server share them, so more servers cannot add throughput on this machine)"
        )
        failover(workdir, llm, max(20, args.groups // 2), args.group_size)


if __name__ == "__main__":
    main()
