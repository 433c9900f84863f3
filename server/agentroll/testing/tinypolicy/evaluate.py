"""Evaluate a policy served by a vLLM-protocol engine through agentroll: tool use and reward.

The arithmetic questions are held out (`synth.held_out`: never in the training data), so a
reward there means the policy computes with the tool, not that it remembers answers.
"""

import statistics
from collections import defaultdict
from dataclasses import dataclass

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.schema import JobRequest, Trajectory
from agentroll.testing.tinypolicy.data import tool_math_instance
from agentroll.testing.tinypolicy.rollouts import job
from agentroll.testing.tinypolicy.synth import held_out_tasks

EVAL_SEED = 1_000_003
"""Arithmetic seed of evaluation questions (training uses small seeds)."""


def family(t: Trajectory) -> str:
    """`arithmetic` for generated questions, else the handler's name."""
    return "arithmetic" if t.job_id.startswith("eval-arith-") else t.handler


def used_a_tool(t: Trajectory) -> bool:
    """The policy called a tool other than `submit` and took another turn after its output."""
    calls = [
        (i, c["function"]["name"])
        for i, m in enumerate(t.messages)
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    last_assistant = max(
        (i for i, m in enumerate(t.messages) if m.get("role") == "assistant"), default=-1
    )
    return any(name != "submit" and i < last_assistant for i, name in calls)


@dataclass(frozen=True)
class FamilyScore:
    rollouts: int
    mean_reward: float
    tool_rate: float
    """Fraction of rollouts that used a tool and went on after its output."""
    rewarded_tool_rollouts: int
    """Rollouts that used a tool and earned reward 1."""
    outcomes: dict[str, int]
    errors: dict[str, str]
    """One example message per error type."""


def score(trajectories: list[Trajectory]) -> dict[str, FamilyScore]:
    by_family: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_family[family(t)].append(t)
    out = {}
    for name, group in sorted(by_family.items()):
        outcomes: dict[str, int] = defaultdict(int)
        for t in group:
            outcomes[t.outcome.value] += 1
        out[name] = FamilyScore(
            rollouts=len(group),
            mean_reward=statistics.fmean(t.reward or 0.0 for t in group),
            tool_rate=statistics.fmean(used_a_tool(t) for t in group),
            rewarded_tool_rollouts=sum(used_a_tool(t) and t.reward == 1.0 for t in group),
            outcomes=dict(outcomes),
            errors={t.error.type: t.error.message[:200] for t in group if t.error is not None},
        )
    return out


def evaluation_jobs(arithmetic: int, bundled: bool = True, seed: int = 0) -> list[JobRequest]:
    """`arithmetic` unseen arithmetic questions (drawn from `seed`), plus (if `bundled`) each
    bundled math and code task once; sampled at temperature 1, unseeded (see `job`)."""
    jobs = [
        job(f"eval-arith-{i}", "math", tool_math_instance(t.instance()), seed=None)
        for i, t in enumerate(held_out_tasks(arithmetic, seed=EVAL_SEED + seed))
    ]
    if bundled:
        for t in load_math_tasks():
            jobs.append(job(f"eval-{t.id}", "math", tool_math_instance(t.instance()), seed=None))
        for c in load_code_tasks():
            jobs.append(job(f"eval-{c.id}", "code", c.instance(), seed=None, max_tokens=1024))
    return jobs
