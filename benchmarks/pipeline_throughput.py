"""Single-turn math rollouts through the full HTTP path on this machine.

Client (this process), agentroll server and scripted vLLM backend are three processes on
the same cores. Reports rollouts/s and the server's CPU time per rollout.
Targets (issue 2): >= 300 rollouts/s, <= 3 ms server CPU per rollout.

    .venv/bin/python benchmarks/pipeline_throughput.py [--jobs 3000]
"""

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import cpu_seconds, report

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.launch import agentroll_process
from agentroll.trainer_clients import RolloutClient


def jobs(n: int, tag: str) -> list[dict[str, object]]:
    tasks = load_math_tasks()
    return [
        {
            "job_id": f"{tag}-{i}",
            "group_id": f"{tag}-g{i // 8}",
            "handler": "math",
            "instance": tasks[i % len(tasks)].instance(),
            "sampling": {"seed": i, "max_tokens": 256},
        }
        for i in range(n)
    ]


def run(client: RolloutClient, n: int, tag: str, after: int) -> tuple[float, int, Counter[str]]:
    batch = jobs(n, tag)
    started = time.perf_counter()
    for i in range(0, n, 500):
        client.submit(batch[i : i + 500])
    outcomes: Counter[str] = Counter()
    cursor = after
    while sum(outcomes.values()) < n:
        page = client.results(after=cursor, limit=1000, wait=5)
        outcomes.update(t.outcome.value for t in page.results)
        cursor = page.next_cursor
    return time.perf_counter() - started, cursor, outcomes


@contextmanager
def served(env: dict[str, str]) -> Iterator[tuple[RolloutClient, int]]:
    """A scripted vLLM backend and an agentroll server (processes of their own), the
    backend registered: a client of the server, and the server's pid."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            agentroll_process(["scripted-llm", "--port", "0"], work, "llm") as llm,
            agentroll_process(
                ["serve", "--port", "0", "--db", str(work / "a.db")], work, "server", env=env
            ) as server,
            RolloutClient(server.url, token=server.token, timeout_s=60) as client,
        ):
            client.add_backend({"id": "llm", "base_url": llm.url})
            yield client, server.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3000)
    args = parser.parse_args()
    env = {
        "AGENTROLL_POOLS__INIT": "256",
        "AGENTROLL_POOLS__RUN": "256",
        "AGENTROLL_POOLS__EVAL": "64",
        "AGENTROLL_POOLS__READY_BUFFER": "512",
        "AGENTROLL_LOG_LEVEL": "warning",
    }
    with served(env) as (client, server_pid):
        _, cursor, _ = run(client, 300, "warmup", 0)  # lazy imports, warm connections
        cpu0 = cpu_seconds(server_pid)
        elapsed, _, outcomes = run(client, args.jobs, "bench", cursor)
        cpu_ms = (cpu_seconds(server_pid) - cpu0) * 1000 / args.jobs
    rate = args.jobs / elapsed
    if set(outcomes) != {"ok"}:
        raise SystemExit(f"not every rollout succeeded: {dict(outcomes)}")
    print(
        f"pipeline_throughput: {args.jobs} single-turn math rollouts, full HTTP path, 3 processes"
    )
    report("rollouts per second", rate, "rollout/s", ">= 300", rate >= 300)
    report("server CPU per rollout", cpu_ms, "ms", "<= 3", cpu_ms <= 3)


if __name__ == "__main__":
    main()
