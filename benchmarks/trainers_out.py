"""The ecosystem adapters' CPU per rollout, against agentroll's own CPU for the same rollout.

Runs single-turn math rollouts through the full HTTP path (scripted vLLM backend, agentroll
server, this client: three processes), as `pipeline_throughput` does, and measures the
server's CPU per rollout. Then converts every finished trajectory with each adapter, to the
bytes it would put on the wire, and measures this process's CPU per trajectory:

- ATIF: `to_atif` + JSON (what `agentroll export` writes);
- Atropos: `to_scored_data` per group of 8 + JSON (the `/scored_data` body);
- NeMo Gym: `verify_response` + JSON (the `/run` answer);
- prime-rl: `to_episode` + msgpack (the env server's `run` reply).

Single-turn math is the cheapest rollout agentroll runs (no sandbox, no tool), so the ratio
is the worst case. Target (issue 30): <= 10 % added CPU per rollout.

    .venv/bin/python benchmarks/trainers_out.py [--jobs 400] [--repeat 5]
"""

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable

import msgpack
from _common import cpu_seconds, report
from pipeline_throughput import run, served

from agentroll.server.schema import Trajectory
from agentroll.trainer_clients.adapters import to_scored_data
from agentroll.trainer_clients.exports import to_atif
from agentroll.trainer_clients.exports.nemo_gym import verify_response
from agentroll.trainer_clients.exports.verifiers_episode import to_episode

ROW = {"responses_create_params": {"input": "?"}, "agent_ref": {"name": "agentroll"}}


def _rollouts(n: int) -> tuple[list[Trajectory], float]:
    env = {"AGENTROLL_LOG_LEVEL": "warning", "AGENTROLL_POOLS__RUN": "64"}
    with served(env) as (client, server_pid):
        _, cursor, _ = run(client, 100, "warmup", 0)  # lazy imports, warm connections
        cpu0 = cpu_seconds(server_pid)
        run(client, n, "bench", cursor)
        cpu_ms = (cpu_seconds(server_pid) - cpu0) * 1000 / n
        trajectories: list[Trajectory] = []
        while len(trajectories) < n:
            page = client.results(after=cursor, limit=1000)
            trajectories += page.results
            cursor = page.next_cursor
    return trajectories, cpu_ms


def _per_trajectory_ms(
    convert: Callable[[list[Trajectory]], object], items: list[list[Trajectory]], repeat: int
) -> float:
    count = sum(len(group) for group in items)
    started = time.process_time()
    for _ in range(repeat):
        for group in items:
            convert(group)
    return (time.process_time() - started) * 1000 / (count * repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trajectories, server_ms = _rollouts(args.jobs)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.group_id or t.job_id].append(t)
    singles = [[t] for t in trajectories]
    adapters: dict[str, tuple[Callable[[list[Trajectory]], object], list[list[Trajectory]]]] = {
        "ATIF export": (lambda g: json.dumps(to_atif(g[0])), singles),
        "Atropos /scored_data": (lambda g: json.dumps(to_scored_data(g)), list(groups.values())),
        "NeMo Gym /run answer": (lambda g: json.dumps(verify_response(g[0], ROW, "m")), singles),
        "prime-rl episode": (
            lambda g: msgpack.packb(to_episode(g[0], {"type": "math", "data": {}})),
            singles,
        ),
    }
    print(
        f"trainers_out: {args.jobs} single-turn math rollouts; agentroll server CPU "
        f"{server_ms:.2f} ms per rollout"
    )
    for name, (convert, items) in adapters.items():
        ms = _per_trajectory_ms(convert, items, args.repeat)
        share = 100 * ms / server_ms
        report(f"{name}: CPU per rollout", ms, "ms", "", True)
        report(f"{name}: share of agentroll's", share, "%", "<= 10", share <= 10)


if __name__ == "__main__":
    main()
