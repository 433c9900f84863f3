"""Red-team benchmark: every attack of the red-team suite against honest rollouts in flight.

Runs the honest rollouts alone first (the unloaded reference), then again beside every attack
(`agentroll.testing.redteam`: a scripted adversarial policy through the real server in bubblewrap
sandboxes), and prints per attack its outcome, reward and time to finish, then the honest
rollouts' completion rate, their tool-call latency against the unloaded run, the worst
`/healthz` latency and leaked sandbox processes, each beside its target.

    .venv/bin/python benchmarks/redteam.py [--honest 64]

Tool-call latency is per rollout (tool time / tool calls); its p99 is over the honest rollouts.
"""

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from _common import report

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import ATTACKS, HONEST_REWARD, BatchResult, run_batch


def _tool_ms(rollouts: dict[str, Trajectory]) -> list[float]:
    return [
        1000 * t.timing.tool_s / t.timing.tool_calls
        for t in rollouts.values()
        if t.timing.tool_calls
    ]


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else max(values, default=0)


def _print_attacks(result: BatchResult) -> int:
    print(f"\n  {'attack':<24} {'outcome':<12} {'reward':>6} {'honest':>6} {'seconds':>8}")
    wrong = 0
    for name, t in result.attacks.items():
        honest = t.outcome is Outcome.ok and t.reward == HONEST_REWARD[name]
        wrong += not honest
        reward = "-" if t.reward is None else f"{t.reward:.1f}"
        mark = "yes" if honest else "NO"
        print(f"  {name:<24} {t.outcome.value:<12} {reward:>6} {mark:>6} {t.timing.total_s:>8.1f}")
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest", type=int, default=64, help="honest rollouts in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentroll-redteam-") as tmp:
        quiet = asyncio.run(run_batch(Path(tmp) / "unloaded", {}, args.honest))
        loud = asyncio.run(run_batch(Path(tmp) / "attacked", ATTACKS, args.honest))
    print(f"red team: {len(ATTACKS)} attacks beside {args.honest} honest rollouts")
    wrong = _print_attacks(loud)
    right = sum(t.outcome is Outcome.ok and t.reward == 1.0 for t in loud.honest.values()) / max(
        len(loud.honest), 1
    )
    ratio = _p99(_tool_ms(loud.honest)) / max(_p99(_tool_ms(quiet.honest)), 1e-9)
    print()
    report("attacks scored honestly", len(ATTACKS) - wrong, f"of {len(ATTACKS)}", "all", not wrong)
    report("honest rollouts right", 100 * right, "%", "100 %", right == 1.0)
    report("honest tool p99 vs unloaded", ratio, "x", "<= 3x", ratio <= 3)
    report("  (unloaded tool p99)", _p99(_tool_ms(quiet.honest)), "ms", "-", True)
    report("  (attacked tool p99)", _p99(_tool_ms(loud.honest)), "ms", "-", True)
    worst = 1000 * loud.healthz_worst_s
    report("worst /healthz", worst, "ms", "<= 200 ms", worst <= 200)
    report("  (worst /healthz unloaded)", 1000 * quiet.healthz_worst_s, "ms", "-", True)
    leaked = len(loud.leaked_pids | quiet.leaked_pids)
    report("leaked sandbox processes", leaked, "", "0", leaked == 0)


if __name__ == "__main__":
    main()
