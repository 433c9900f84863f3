"""Red team of the `code` grader's verdicts, through the real server in bubblewrap sandboxes:
results whose type lies about itself (`int`, `str`, `list`, `dict` subclasses that equal
anything) and solutions saved under the name of a module the test runner imports (`json.py`,
`subprocess.py`) earn nothing, while the same tasks solved honestly, under the same file
names, earn 1.0."""

import asyncio
import shutil

import pytest

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import BatchResult, run_batch
from agentroll.testing.redteam_codegrade import ATTACKS, GAMING, LIARS, SHADOWED_MODULES

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
CONTROLS = sorted(set(ATTACKS) - set(GAMING))


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchResult:
    return asyncio.run(run_batch(tmp_path_factory.mktemp("redteam-codegrade"), ATTACKS, 3))


def _explain(t: Trajectory) -> str:
    return f"{t.outcome} reward={t.reward} error={t.error} info={t.reward_info}"


@pytest.mark.parametrize("name", sorted(LIARS))
def test_a_result_that_lies_about_its_type_passes_no_test(batch: BatchResult, name: str) -> None:
    t = batch.attacks[f"code_{name}"]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)
    tests = t.reward_info["tests"]
    assert t.reward_info["passed"] == 0 and tests, _explain(t)
    assert all(r["detail"].endswith(", not plain data") for r in tests), _explain(t)
    assert all("returned a solution." in r["detail"] for r in tests), _explain(t)


@pytest.mark.parametrize("module", SHADOWED_MODULES)
def test_a_solution_named_like_a_module_of_the_runner_cannot_forge_its_report(
    batch: BatchResult, module: str
) -> None:
    """Imported by the runner, it would print a pass of every test with the runner's token;
    in its own process it only waits for its stdin to end, so each test times out."""
    t = batch.attacks[f"code_shadow_{module}"]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)
    assert t.reward_info["passed"] == 0, _explain(t)
    assert all(r["detail"].startswith("timed out") for r in t.reward_info["tests"]), _explain(t)


@pytest.mark.parametrize("name", CONTROLS)
def test_the_honest_control_beside_each_attack_earns_its_reward(
    batch: BatchResult, name: str
) -> None:
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)


def test_honest_rollouts_of_every_family_keep_their_rewards(batch: BatchResult) -> None:
    wrong = {
        k: _explain(t)
        for k, t in batch.honest.items()
        if (t.outcome, t.reward) != (Outcome.ok, 1.0)
    }
    assert len(batch.honest) == 3 and wrong == {}


def test_no_sandbox_process_outlives_the_batch(batch: BatchResult) -> None:
    assert batch.sandboxes_seen > 0 and batch.leaked_pids == set()
