"""Red-team benchmark: every class of attack in the catalogue, scored against honest controls.

Runs the red-team catalogue through the real server in bubblewrap sandboxes, as the suite in
`tests/redteam/` does, and prints one row per class of attack: attacks tried, attacks graded
honestly (the outcome and reward an honest grader gives), and controls passed (honest answers
beside them that must keep their reward, or a grader broken for everyone that must stay
`infra_error`). Then the service figures of the main batch (honest rollouts right, tool-call
latency against an unloaded run, worst `/healthz`, leaked sandbox processes) and the cost of
grading: EVAL work seconds per honest rollout per family.

    .venv/bin/python benchmarks/redteam.py [--honest 24] [--graders] [--save eval.json]
    .venv/bin/python benchmarks/redteam.py --eval-only --save before.json   # on another revision
    .venv/bin/python benchmarks/redteam.py --before before.json             # EVAL before/after

`--graders` adds the Harbor, LLM-judge and remote-verifier classes (their Harbor task images
are built on first use into the test image cache, a few minutes). `--eval-only` runs only the
honest rollouts and needs nothing but `run_batch`, so the file can be copied onto an older
checkout to measure EVAL there.
"""

import argparse
import asyncio
import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import report

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing import redteam
from agentroll.testing.redteam import BatchResult, run_batch


@dataclass(frozen=True)
class AttackClass:
    name: str
    attacks: tuple[str, ...]
    controls: tuple[str, ...] = ()


# The catalogue's newer modules are imported where used, so that `--eval-only` runs on an
# older checkout that has only `run_batch`.
def _main_classes() -> list[AttackClass]:
    from agentroll.testing import redteam_codegrade, redteam_swegrade

    code = redteam_codegrade.ATTACKS
    return [
        AttackClass("service: kill, bomb, hog, fill", tuple(redteam.TOOL_ATTACKS)),
        AttackClass("service: LLM proxy abuse", tuple(redteam.PROXY_SCRIPTS)),
        AttackClass(
            "math: pathological answers",
            ("pathological_power", "pathological_factorial", "ambiguous_commas"),
        ),
        AttackClass("swe: forged report, test setup", ("forged_test_output", "test_infra_edit")),
        AttackClass(
            "swe: import shadowing",
            tuple(redteam_swegrade.SWEGRADE_GAMING),
            ("swe_shadow_control",),
        ),
        AttackClass("swe: /tmp and workspace fills", ("swe_fill_tmp", "swe_fill_workspace")),
        AttackClass("swe: future git history", ("swe_history_probe",)),
        AttackClass(
            "code: objects that lie",
            tuple(n for n in code if n.startswith("code_lying_")),
            tuple(n for n in code if n.startswith("code_honest_") and not n.endswith("_py")),
        ),
        AttackClass(
            "code: runner shadowing",
            tuple(n for n in code if n.startswith("code_shadow_")),
            tuple(n for n in code if n.startswith("code_honest_") and n.endswith("_py")),
        ),
        AttackClass("code: early exit, eval hijack", ("exit_early", "eval_hijack")),
    ]


def _main_verdict(name: str, t: Trajectory) -> bool:
    return t.outcome is Outcome.ok and t.reward == redteam.HONEST_REWARD[name]


def _budget_verdict(name: str, t: Trajectory) -> bool:
    from agentroll.testing.redteam_budgets import BUDGET_FINISH

    if name in BUDGET_FINISH:
        return t.outcome is Outcome.agent_error and t.reward == 0.0
    return t.outcome is Outcome.ok and t.reward == 1.0


def _grader_verdict(name: str, t: Trajectory) -> bool:
    from agentroll.testing.redteam_graders import EXPECTED

    expected = EXPECTED[name]
    return (t.outcome, t.reward) == (expected.outcome, expected.reward)


Verdict = Callable[[str, Trajectory], bool]


def _rows(classes: list[AttackClass], result: BatchResult, verdict: Verdict) -> int:
    """Prints one row per class; returns how many attacks or controls were scored wrong."""
    wrong = 0
    for c in classes:
        honest = sum(verdict(n, result.attacks[n]) for n in c.attacks)
        controls = sum(verdict(n, result.attacks[n]) for n in c.controls)
        wrong += len(c.attacks) - honest + len(c.controls) - controls
        control_text = f"{controls}/{len(c.controls)}" if c.controls else "-"
        print(f"  {c.name:<36} {len(c.attacks):>5} {honest:>8} {control_text:>9}")
    return wrong


def _tool_ms(rollouts: dict[str, Trajectory]) -> list[float]:
    return [
        1000 * t.timing.tool_s / t.timing.tool_calls
        for t in rollouts.values()
        if t.timing.tool_calls
    ]


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else max(values, default=0)


def eval_seconds(rollouts: dict[str, Trajectory]) -> dict[str, float]:
    """Median EVAL work seconds per honest rollout, by family."""
    by_family: dict[str, list[float]] = {}
    for t in rollouts.values():
        if t.timing.eval is not None:
            by_family.setdefault(t.handler, []).append(t.timing.eval.work_s)
    return {family: statistics.median(s) for family, s in sorted(by_family.items())}


def _print_eval(after: dict[str, float], before: dict[str, float]) -> None:
    print(f"\n  {'EVAL s per honest rollout':<36} {'before':>8} {'after':>8} {'change':>8}")
    for family, seconds in after.items():
        old = before.get(family)
        change = f"{100 * (seconds / old - 1):+.0f} %" if old else "-"
        old_text = f"{old:.2f}" if old is not None else "-"
        print(f"  {family:<36} {old_text:>8} {seconds:>8.2f} {change:>8}")


async def _grader_batch(workdir: Path) -> BatchResult:
    from tests.support.images import CACHE
    from tests.support.task_images import task_bases

    from agentroll.testing.redteam_graders import run_grader_batch

    await asyncio.to_thread(task_bases, CACHE)
    return await run_grader_batch(workdir, CACHE)


def _run_all(tmp: Path, honest: int, graders: bool) -> dict[str, Trajectory]:
    """Every batch, with its rows and figures printed; returns the unloaded honest rollouts."""
    from agentroll.testing.redteam_budgets import (
        BUDGET_ATTACKS,
        BUDGET_FINISH,
        BUDGET_POLICY,
        BUDGET_REQUESTS,
        CONTROLS,
    )

    quiet = asyncio.run(run_batch(tmp / "unloaded", {}, honest))
    loud = asyncio.run(run_batch(tmp / "attacked", redteam.ATTACKS, honest))
    budget = asyncio.run(
        run_batch(
            tmp / "budgets", BUDGET_ATTACKS, 0, policy=BUDGET_POLICY, requests=BUDGET_REQUESTS
        )
    )
    print(f"\n  {'class':<36} {'tried':>5} {'honestly':>8} {'controls':>9}")
    wrong = _rows(_main_classes(), loud, _main_verdict)
    budgets = AttackClass("budgets: time and calls", tuple(BUDGET_FINISH), CONTROLS)
    wrong += _rows([budgets], budget, _budget_verdict)
    if graders:
        from agentroll.testing.redteam_graders import EXPECTED

        result = asyncio.run(_grader_batch(tmp / "graders"))
        classes = [
            AttackClass(
                f"graders: {kind}",
                tuple(n for n, e in EXPECTED.items() if n.startswith(kind) and e.reward == 0.0),
                tuple(n for n, e in EXPECTED.items() if n.startswith(kind) and e.reward != 0.0),
            )
            for kind in ("harbor", "judge", "remote")
        ]
        wrong += _rows(classes, result, _grader_verdict)
    right = sum(t.outcome is Outcome.ok and t.reward == 1.0 for t in loud.honest.values())
    ratio = _p99(_tool_ms(loud.honest)) / max(_p99(_tool_ms(quiet.honest)), 1e-9)
    worst = 1000 * loud.healthz_worst_s
    leaked = len(loud.leaked_pids | quiet.leaked_pids | budget.leaked_pids)
    print()
    report("attacks and controls scored wrong", wrong, "", "0", wrong == 0)
    share = 100 * right / max(len(loud.honest), 1)
    report("honest rollouts right", share, "%", "100 %", right == len(loud.honest))
    report("honest tool p99 vs unloaded", ratio, "x", "<= 3x", ratio <= 3)
    report("worst /healthz", worst, "ms", "<= 200 ms", worst <= 200)
    report("leaked sandbox processes", leaked, "", "0", leaked == 0)
    return quiet.honest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest", type=int, default=24, help="honest rollouts in flight")
    parser.add_argument("--graders", action="store_true", help="add Harbor, judge, remote")
    parser.add_argument("--eval-only", action="store_true", help="honest rollouts only")
    parser.add_argument("--save", type=Path, help="write EVAL seconds per family as JSON")
    parser.add_argument("--before", type=Path, help="EVAL seconds of another revision")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentroll-redteam-") as tmp:
        if args.eval_only:
            honest = asyncio.run(run_batch(Path(tmp) / "honest", {}, args.honest)).honest
        else:
            honest = _run_all(Path(tmp), args.honest, args.graders)
    after = eval_seconds(honest)
    before = json.loads(args.before.read_text()) if args.before else {}
    _print_eval(after, before)
    if args.save:
        args.save.write_text(json.dumps(after))


if __name__ == "__main__":
    main()
