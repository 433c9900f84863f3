"""The red-team budget entries through the real server in bubblewrap: a policy that spends its
time (a reply full of sleeps, sleeps turn after turn, a harness that never exits) or floods a
reply with calls is stopped by its own budget inside RUN's timeout and graded on what it left
-- `agent_error` with reward 0 -- never `timed_out` (which a trainer drops and resamples). The
honest controls, slow but inside their budget, keep reward 1.0."""

import asyncio
import os
import shutil

import pytest

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import BatchResult, run_batch
from agentroll.testing.redteam_budgets import (
    BUDGET_ATTACKS,
    BUDGET_FINISH,
    BUDGET_POLICY,
    BUDGET_REQUESTS,
    CONTROLS,
)

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
HONEST = 3


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchResult:
    workdir = tmp_path_factory.mktemp("redteam-budgets")
    return asyncio.run(
        run_batch(workdir, BUDGET_ATTACKS, HONEST, policy=BUDGET_POLICY, requests=BUDGET_REQUESTS)
    )


def _explain(t: Trajectory) -> str:
    return (
        f"{t.outcome} reward={t.reward} finish={t.finish_reason} error={t.error} "
        f"tools={t.metadata.get('tool_calls')} timing={t.timing}"
    )


@pytest.mark.parametrize("name", sorted(BUDGET_FINISH))
def test_a_policy_that_spends_its_budget_is_graded_not_timed_out(
    batch: BatchResult, name: str
) -> None:
    t = batch.attacks[name]
    assert (t.outcome, t.status, t.reward) == (Outcome.agent_error, "completed", 0.0), _explain(t)
    finish, cause = BUDGET_FINISH[name]
    assert t.error is not None and (t.finish_reason, t.error.type) == (finish, cause), _explain(t)
    assert t.error.stage == "run"


def test_a_reply_over_the_call_cap_runs_none_of_its_calls(batch: BatchResult) -> None:
    t = batch.attacks["too_many_calls"]
    assert t.error is not None and "17 tool calls in one reply" in t.error.message
    assert "tool_calls" not in t.metadata and t.timing.tool_calls == 0, _explain(t)


def test_a_sleep_flood_runs_only_what_its_budget_allows(batch: BatchResult) -> None:
    """Twelve 30 s sleeps in one reply, 54 s of budget: the calls after it never ran."""
    t = batch.attacks["sleep_flood"]
    assert 1 <= t.metadata["tool_calls"]["bash"] <= 2, _explain(t)


@pytest.mark.parametrize("name", CONTROLS)
def test_a_slow_honest_policy_inside_its_budget_keeps_its_reward(
    batch: BatchResult, name: str
) -> None:
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)


def test_honest_rollouts_beside_them_keep_their_rewards(batch: BatchResult) -> None:
    assert len(batch.honest) == HONEST
    right = (Outcome.ok, 1.0)
    wrong = {k: _explain(t) for k, t in batch.honest.items() if (t.outcome, t.reward) != right}
    assert wrong == {}


def test_graders_report_their_cpu_and_wall_time(batch: BatchResult) -> None:
    """The honest `code` and `swe` rollouts were graded by commands under a CPU-time limit:
    their timing says how long those ran and, where cgroups counted it, their CPU time."""
    graded = [t for t in batch.honest.values() if t.handler in ("code", "swe")]
    assert {t.handler for t in graded} == {"code", "swe"}
    for t in graded:
        assert t.timing.grade_wall_s > 0, _explain(t)
        if os.geteuid() == 0:  # a root server has cgroups (else: wall-clock limits, no count)
            assert t.timing.grade_cpu_s is not None and t.timing.grade_cpu_s > 0, _explain(t)
    math = next(t for t in batch.honest.values() if t.handler == "math")
    assert (math.timing.grade_wall_s, math.timing.grade_cpu_s) == (0.0, 0.0)  # no command ran


def test_no_sandbox_process_outlives_the_batch(batch: BatchResult) -> None:
    assert batch.sandboxes_seen > 0
    assert batch.leaked_pids == set()
