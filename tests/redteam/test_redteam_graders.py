"""Red team against graders, through the real server: a policy that hangs, crashes, floods or
talks its grader out of a verdict earns 0 with the reason (the grader still works on a control
answer), never an `infra_error` to be resampled; a grader broken for everyone stays
`infra_error`; honest rollouts beside them keep their rewards."""

import asyncio
import shutil

import pytest
from tests.support.images import CACHE
from tests.support.task_images import BUILD_TIMEOUT_S, needs_task_build, task_bases

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import BatchResult
from agentroll.testing.redteam_graders import EXPECTED, run_grader_batch

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(2 * BUILD_TIMEOUT_S),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
    *needs_task_build,
]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchResult:
    task_bases(CACHE)
    return asyncio.run(run_grader_batch(tmp_path_factory.mktemp("redteam-graders"), CACHE))


def _explain(t: Trajectory) -> str:
    return f"{t.outcome} reward={t.reward} error={t.error} info={t.reward_info}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_grader_failure_is_blamed_where_its_control_says(
    batch: BatchResult, name: str
) -> None:
    t, expected = batch.attacks[name], EXPECTED[name]
    assert (t.outcome, t.reward) == (expected.outcome, expected.reward), _explain(t)
    if expected.outcome is Outcome.infra_error:
        assert t.error is not None and t.error.type == expected.why, _explain(t)
        assert "control answer too" in t.error.message
    elif expected.why:
        assert t.reward_info.get("reason") == expected.why, _explain(t)


@pytest.mark.parametrize(
    "name", sorted(n for n, e in EXPECTED.items() if e.reward == 0.0 and e.why)
)
def test_a_zero_for_breaking_the_grader_names_the_control_that_passed(
    batch: BatchResult, name: str
) -> None:
    control = batch.attacks[name].reward_info["control"]
    assert control["passed"] is True, control
    if name.startswith("harbor_"):
        assert control["detail"] == "on the reference solution: reward 1"


def test_healthz_stays_responsive_and_no_sandbox_process_outlives_the_batch(
    batch: BatchResult,
) -> None:
    assert batch.healthz_polls > 10 and batch.healthz_worst_s < 10.0
    assert batch.sandboxes_seen > 0 and batch.leaked_pids == set()
