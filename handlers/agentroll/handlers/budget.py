"""How long a loop the policy drives may still run in RUN: its budget.

A policy that burns its time (a reply full of `sleep`s, a harness that never exits) must be
stopped by its own budget and graded on what it left (`agent_error`, with a reward), never by
RUN's stage timeout or the job's deadline (`timed_out`: dropped and resampled, so slow rollouts
would vanish from every group and bias training toward fast answers). So the budget ends
before either:

- RUN's stage timeout, less a margin in which the loop stops its last tool call and returns;
- the job's deadline, less EVAL's room (its stage timeout; half the deadline when that is
  shorter), so what the budget leaves is still graded.

Both count the agent's time only (`ctx.agent_time()`: RUN's work so far). Time the server
took (queues, admission, INIT) never shortens the budget into a 0; when it leaves too little,
the job's deadline ends the rollout `timed_out`, which is the server's doing.
"""

import math

from agentroll.handlers.context import RolloutContext

STOP_MARGIN_S = 10.0
STOP_MARGIN_FRACTION = 0.1
"""The margin kept inside a stage's timeout to stop what runs and return: 10 % of it, at most
10 s (RUN's for the agent's loop, EVAL's for a grader's command)."""


def stop_margin_s(stage_timeout_s: float) -> float:
    return min(STOP_MARGIN_S, STOP_MARGIN_FRACTION * stage_timeout_s)


def run_budget_s(
    *,
    run_timeout_s: float,
    eval_timeout_s: float,
    deadline_s: float,
    agent_time_s: float,
    own_limit_s: float | None = None,
) -> float:
    """Seconds left to the policy's loop (never negative); `own_limit_s` is the loop's own
    setting (`wall_time_s`, a harness's `timeout_s`), counted from now."""
    stage_left = run_timeout_s - stop_margin_s(run_timeout_s) - agent_time_s
    eval_room = min(eval_timeout_s, deadline_s / 2)
    deadline_left = deadline_s - eval_room - agent_time_s
    own = math.inf if own_limit_s is None else own_limit_s
    return max(0.0, min(own, stage_left, deadline_left))


def run_budget(ctx: RolloutContext, own_limit_s: float | None = None) -> float:
    """`run_budget_s` for this rollout, now (call it in RUN)."""
    limits = ctx.limits
    return run_budget_s(
        run_timeout_s=limits.run_timeout_s,
        eval_timeout_s=limits.eval_timeout_s,
        deadline_s=limits.deadline_s,
        agent_time_s=ctx.agent_time(),
        own_limit_s=own_limit_s,
    )
