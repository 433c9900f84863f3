"""Mixed multi-turn rollouts with tools in real sandboxes: where does a rollout's time go?

64 rollouts at once (16 each of swe, code, math with a Python tool, stem), scripted
tool-using policies, 200 ms per generation call, bubblewrap sandboxes. Client (this
process), agentroll server and scripted vLLM backend are three processes on this machine's
cores, which the sandboxes (git, pytest, IPython) share too.

From every trajectory's `timing`:
- llm: time inside backend calls (generation and tokenization);
- tools: time inside tool calls, seen from the agent loop (the action-server round trip
  and the command itself);
- init: sandbox start + task setup; eval: the reward (tests, a fresh checkout for swe);
- agentroll overhead: what is left, i.e. the agent loop's own time (RUN work minus llm and
  tools: parsing calls, bookkeeping, scheduling) plus queueing and hand-off between stages.
Target (issue 5): agentroll overhead <= 5% of rollout wall time.

    .venv/bin/python benchmarks/rollout_mix.py [--rollouts 64] [--latency-s 0.2]
"""

import argparse
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import report

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.handlers.builtin.stem import load_stem_tasks
from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Trajectory
from agentroll.trainer_clients import RolloutClient

FAMILIES = ("swe", "code", "math", "stem")


def jobs(n: int, tag: str) -> list[dict[str, Any]]:
    swe, code = load_swe_tasks(), load_code_tasks()
    math, stem = load_math_tasks(), load_stem_tasks()
    out = []
    for i in range(n):
        family, k = FAMILIES[i % 4], i // 4
        instance: dict[str, Any]
        if family == "swe":
            instance = swe[k % len(swe)].instance
        elif family == "code":
            instance = code[k % len(code)].instance()
        elif family == "math":
            instance = math[k % len(math)].instance(tools=True)
        else:
            instance = stem[k % len(stem)].instance(tools=True)
        out.append(
            {
                "job_id": f"{tag}-{family}-{i}",
                "handler": family,
                "instance": instance,
                "sampling": {"seed": i, "max_tokens": 1024},
            }
        )
    return out


def run(
    client: RolloutClient, batch: list[dict[str, Any]], after: int
) -> tuple[float, int, list[Trajectory]]:
    started = time.perf_counter()
    client.submit(batch)
    results: list[Trajectory] = []
    cursor = after
    while len(results) < len(batch):
        page = client.results(after=cursor, limit=1000, wait=5)
        results.extend(page.results)
        cursor = page.next_cursor
    return time.perf_counter() - started, cursor, results


def breakdown(results: list[Trajectory]) -> dict[str, float]:
    """Seconds summed over rollouts, per part of a rollout's wall time."""
    parts: defaultdict[str, float] = defaultdict(float)
    for t in results:
        tm = t.timing
        stages = [s for s in (tm.init, tm.run, tm.eval) if s is not None]
        run_work = tm.run.work_s if tm.run else 0.0
        parts["total"] += tm.total_s
        parts["llm"] += tm.llm_s
        parts["tools"] += tm.tool_s
        parts["init"] += tm.init.work_s if tm.init else 0.0
        parts["eval"] += tm.eval.work_s if tm.eval else 0.0
        parts["sandbox_start"] += tm.sandbox_start_s
        parts["loop"] += max(0.0, run_work - tm.llm_s - tm.tool_s)
        parts["handoff"] += max(0.0, tm.total_s - sum(s.work_s for s in stages))
        parts["tool_calls"] += tm.tool_calls
    return dict(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--latency-s", type=float, default=0.2)
    args = parser.parse_args()
    env: dict[str, Any] = {
        "AGENTROLL_POOLS__INIT": "64",
        "AGENTROLL_POOLS__RUN": "256",
        "AGENTROLL_POOLS__EVAL": "64",
        "AGENTROLL_POOLS__READY_BUFFER": "128",
        "AGENTROLL_LOG_LEVEL": "warning",
    }
    llm_argv = [
        "scripted-llm", "--port", "0", "--policy", "echo,swe,code,stem,math",
        "--wrong-rate", "0.3", "--latency-s", str(args.latency_s), "--max-model-len", "32768",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            agentroll_process(llm_argv, work, "llm") as llm,
            agentroll_process(
                ["serve", "--port", "0", "--db", str(work / "a.db")], work, "server", env=env
            ) as server,
            RolloutClient(server.url, token=server.token, timeout_s=120) as client,
        ):
            client.add_backend({"id": "llm", "base_url": llm.url})
            _, cursor, _ = run(client, jobs(8, "warmup"), 0)  # imports, kernels, connections
            elapsed, _, results = run(client, jobs(args.rollouts, "bench"), cursor)
    outcomes = Counter(t.outcome.value for t in results)
    if set(outcomes) - {"ok", "agent_error"}:
        raise SystemExit(f"rollouts failed: {dict(outcomes)}")
    parts = breakdown(results)
    total = parts["total"]
    overhead = parts["loop"] + parts["handoff"]
    calls = parts["tool_calls"]
    rewards = [t.reward for t in results if t.reward is not None]
    print(
        f"rollout_mix: {len(results)} concurrent mixed rollouts ({', '.join(FAMILIES)}), "
        f"scripted policies, {args.latency_s * 1000:.0f} ms per LLM call, bubblewrap sandboxes"
    )
    print(
        f"  outcomes {dict(outcomes)}, mean reward {statistics.fmean(rewards):.2f}, "
        f"{calls / len(results):.1f} tool calls and "
        f"{statistics.fmean(t.num_turns for t in results):.1f} turns per rollout, "
        f"mean rollout wall time {total / len(results):.2f} s"
    )
    print("  share of rollout wall time (summed over rollouts):")
    for name, key in (
        ("LLM (generation + tokenize)", "llm"),
        ("tools (in the sandbox)", "tools"),
        ("INIT: sandbox start + task setup", "init"),
        ("  of which sandbox starts (all stages)", "sandbox_start"),
        ("EVAL: reward", "eval"),
        ("agent loop's own time", "loop"),
        ("queueing and stage hand-off", "handoff"),
    ):
        per_rollout = parts[key] / len(results)
        print(f"    {name:<40} {100 * parts[key] / total:6.1f} %  ({per_rollout:.3f} s/rollout)")
    report("rollouts per minute", 60 * len(results) / elapsed, "rollout/min", "(report)", True)
    report(
        "agentroll overhead per tool call",
        1000 * overhead / calls if calls else 0.0,
        "ms",
        "(report)",
        True,
    )
    share = 100 * overhead / total
    report("agentroll overhead share of wall time", share, "%", "<= 5", share <= 5)


if __name__ == "__main__":
    main()
