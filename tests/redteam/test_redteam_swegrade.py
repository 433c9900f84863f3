"""Red team on the `swe` grader's isolation, through the real server in bubblewrap: modules
that shadow the interpreter's own, a full `/tmp` or workspace, a hunt for later history. Each
beside an honest control (the reference fix, earning 1.0) that the defence must not cost."""

import asyncio
import shutil

import pytest

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.redteam import BatchResult, run_batch
from agentroll.testing.redteam_swegrade import SWEGRADE_ATTACKS
from agentroll.testing.scripted_llm.rules.redteam_swegrade import FUTURE_MARKER

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
HONEST = 3


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> BatchResult:
    workdir = tmp_path_factory.mktemp("redteam-swegrade")
    return asyncio.run(run_batch(workdir, SWEGRADE_ATTACKS, HONEST))


def _explain(t: Trajectory) -> str:
    return f"{t.outcome} reward={t.reward} error={t.error} info={t.reward_info}"


def _observations(t: Trajectory) -> str:
    return "\n".join(str(m.get("content")) for m in t.messages if m.get("role") == "tool")


@pytest.mark.parametrize(
    ("name", "path"),
    [("swe_shadow_json", "json.py"), ("swe_shadow_pluggy", "pluggy/__init__.py")],
)
def test_a_module_that_shadows_the_interpreters_own_is_refused(
    batch: BatchResult, name: str, path: str
) -> None:
    """A stdlib-named `json.py` or a `pluggy` package of pytest's own dependency, forging an
    all-passed report: refused before it runs, reward 0."""
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 0.0), _explain(t)
    assert t.reward_info["reason"] == "shadows_module", _explain(t)
    assert t.reward_info["shadowing_paths"] == [path]


def test_a_submodule_named_like_a_stdlib_module_is_graded(batch: BatchResult) -> None:
    """The control: `textkit/json.py` is `textkit.json`, it shadows nothing; the fix earns 1."""
    t = batch.attacks["swe_shadow_control"]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)


@pytest.mark.parametrize("name", ["swe_fill_tmp", "swe_fill_workspace"])
def test_a_full_tmp_or_workspace_does_not_turn_grading_into_infra_error(
    batch: BatchResult, name: str
) -> None:
    """The fix, then `/tmp` and the grader's scratch (or the workspace) filled to the last
    byte: the grader works in a scratch of its own, emptied once the agent is gone."""
    t = batch.attacks[name]
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)
    assert " 100% " in _observations(t), _observations(t)[-500:]


def test_the_repository_holds_no_later_history(batch: BatchResult) -> None:
    """Later commits, tags, branches, remotes, notes, a stash and stray objects were in the
    clone; after INIT none of them can be read, and the fix still earns 1."""
    t = batch.attacks["swe_history_probe"]
    seen = _observations(t)
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0), _explain(t)
    assert "Initial commit" in seen  # `git log --all` ran and shows base_commit
    assert FUTURE_MARKER not in seen
    assert "bad object" in seen or "Not a valid object name" in seen, seen[-800:]


def test_honest_rollouts_beside_the_attacks_keep_their_rewards(batch: BatchResult) -> None:
    wrong = {
        k: _explain(t)
        for k, t in batch.honest.items()
        if (t.outcome, t.reward) != (Outcome.ok, 1.0)
    }
    assert len(batch.honest) == HONEST and wrong == {}
    assert batch.leaked_pids == set()
