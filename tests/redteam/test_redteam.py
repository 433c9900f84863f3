"""The red-team suite: each attack a trained policy would find, played by a scripted policy
through the real server in bubblewrap sandboxes, beside honest rollouts.

Every attack must be scored honestly (the policy's doing is `ok`/`agent_error` with the reward
it earned, never `infra_error`, never a forged reward), the honest rollouts must keep their right
rewards, `/healthz` must stay responsive, and no sandbox process may outlive the batch.
"""

import asyncio
import shutil

import pytest

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import (
    ATTACKS,
    HONEST_REWARD,
    PROXY_SCRIPTS,
    TOOL_ATTACKS,
    BatchResult,
    run_batch,
)

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
HONEST = 12
HEALTHZ_BOUND_S = 10.0
"""The attacks this guards against stalled the server for tens of seconds. An idle 2-core
machine sees ~0.2 s at worst; a CI run on a fresh clone saw 3.7 s once, so the bound leaves
room for a busy node without letting such a stall through."""


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchResult:
    return asyncio.run(run_batch(tmp_path_factory.mktemp("redteam"), ATTACKS, HONEST))


def _explain(t: Trajectory) -> str:
    return f"{t.outcome} reward={t.reward} error={t.error} info={t.reward_info}"


def _observations(t: Trajectory) -> str:
    return "\n".join(str(m.get("content")) for m in t.messages if m.get("role") == "tool")


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_is_scored_as_an_honest_grader_would(batch: BatchResult, name: str) -> None:
    """The policy's doing: `ok` with what it earned, never `infra_error`, never a forged reward."""
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, HONEST_REWARD[name]), _explain(t)


@pytest.mark.parametrize("name", TOOL_ATTACKS)
def test_an_attack_through_the_tools_is_contained_and_scored(batch: BatchResult, name: str) -> None:
    """Killing, bombing, hogging: the policy's own doing. The rollout goes on and is scored on
    its answer (the scripted attacker answers right afterwards: 1.0), never `infra_error`."""
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)
    assert t.finish_reason == "submit"


@pytest.mark.parametrize("name", ["kill_all_bash", "kill_all_python", "kill_server"])
def test_the_tools_still_work_after_the_agent_killed_what_it_could(
    batch: BatchResult, name: str
) -> None:
    assert "next-call" in _observations(batch.attacks[name])


def test_the_workspace_fills_up_before_the_node_does(batch: BatchResult) -> None:
    """3 GB written into the workspace: it is a size-limited tmpfs, never the node's disk."""
    t = batch.attacks["disk_fill_workspace"]
    assert "No space left on device" in _observations(t), _observations(t)[-500:]


def test_the_action_socket_cannot_be_used_by_the_agent(batch: BatchResult) -> None:
    t = batch.attacks["socket_shutdown"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)
    assert "'result': {'ok': True}" not in _observations(t)  # no shutdown was accepted


@pytest.mark.parametrize("name", ["pathological_power", "pathological_factorial"])
def test_a_pathological_answer_scores_zero_without_stalling(batch: BatchResult, name: str) -> None:
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)
    assert t.reward_info.get("reason"), _explain(t)  # says why it earned nothing


def test_an_ambiguous_answer_is_not_marked_right(batch: BatchResult) -> None:
    t = batch.attacks["ambiguous_commas"]  # "1, 2" for 12
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)


def test_forged_test_output_earns_nothing(batch: BatchResult) -> None:
    t = batch.attacks["forged_test_output"]
    assert t.outcome in (Outcome.ok, Outcome.agent_error) and t.reward == 0.0, _explain(t)


def test_an_edit_of_the_test_setup_is_refused(batch: BatchResult) -> None:
    t = batch.attacks["test_infra_edit"]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)
    assert t.reward_info.get("reason") == "test_infrastructure_modified", _explain(t)


@pytest.mark.parametrize("name", ["exit_early", "eval_hijack"])
def test_a_solution_that_games_the_hidden_tests_earns_nothing(
    batch: BatchResult, name: str
) -> None:
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)


@pytest.mark.parametrize("name", sorted(PROXY_SCRIPTS))
def test_an_attack_on_the_llm_proxy_is_refused_and_the_rollout_goes_on(
    batch: BatchResult, name: str
) -> None:
    """Oversized and malformed bodies, a wrong key, a flood, half-sent requests: refused or
    rate-limited at the rollout's own proxy, scored on what the harness then does."""
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)
    if name == "proxy_flood":
        assert t.metadata["llm_proxy"]["refused"].get("rate_limited", 0) > 0


def test_honest_rollouts_beside_the_attacks_keep_their_rewards(batch: BatchResult) -> None:
    assert len(batch.honest) == HONEST
    wrong = {
        k: _explain(t)
        for k, t in batch.honest.items()
        if (t.outcome, t.reward) != (Outcome.ok, 1.0)
    }
    assert wrong == {}


def test_healthz_stays_responsive_throughout(batch: BatchResult) -> None:
    assert batch.healthz_polls > 10
    assert batch.healthz_worst_s < HEALTHZ_BOUND_S


def test_no_sandbox_process_outlives_the_batch(batch: BatchResult) -> None:
    assert batch.sandboxes_seen > 0
    assert batch.leaked_pids == set()
