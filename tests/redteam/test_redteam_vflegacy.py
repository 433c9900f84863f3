"""Attack: a reply that a legacy verifiers environment's reward code executes (a code task's
grader runs the completion: `agentroll-vf-legacy-exec` in `tests/fixtures/verifiers_legacy_pkg`)
rewrites what scores later rollouts in the same warm worker, so that they earn rewards they
did not. A legacy environment is one long-lived object loaded in the worker (`load_environment`
runs once per worker): its rubric, its functions and the interpreter's builtins would all
outlive the rollout that changed them. Doors: the reward function's code, a builtin the
scoring calls, and the loaded environment's own rubric (its weights). Beside each, the honest
control: the same wrong reply scored before and after earns its own reward, 0.5 (wrong, but
brief), both times."""

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.server.schema import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PACKAGE = str(Path(__file__).resolve().parents[1] / "fixtures" / "verifiers_legacy_pkg")
SPEC = {"id": "agentroll-vf-legacy-exec", "packages": [PACKAGE], "score_timeout_s": 120}
POISONS = {
    "patch-function": (
        "import agentroll_vf_legacy_exec as m; "
        "m.checked.__code__ = (lambda completion, answer: answer).__code__"
    ),
    "patch-builtin": "import builtins; builtins.float = lambda value=0: 1.0",
    "patch-rubric": (
        "import gc, verifiers as vf; "
        "[setattr(r, 'weights', [9.0] * len(r.weights)) "
        "for r in gc.get_objects() if isinstance(r, vf.Rubric)]"
    ),
}


def job(job_id: str, reply: str) -> dict[str, Any]:
    row = {"prompt": [{"role": "user", "content": f"Repeat after me: {reply}"}], "answer": "42"}
    return {
        "job_id": job_id,
        "handler": "verifiers_legacy",
        "instance": {"environment": SPEC, "row": {**row, "example_id": 0}},
    }


async def test_a_reply_the_grader_runs_cannot_change_how_later_rollouts_are_scored(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        # One at a time, so each later one is scored by the worker the poison ran in.
        before = await run_jobs(client, [job("before", "41")], timeout_s=600)
        results: dict[str, Any] = {}
        for door, poison in sorted(POISONS.items()):
            results |= await run_jobs(client, [job(door, f"EXEC:{poison}")], timeout_s=600)
            results |= await run_jobs(client, [job(f"after-{door}", "41")], timeout_s=600)

    honest = before["before"]
    assert (honest.outcome, honest.reward) == (Outcome.ok, 0.5), honest.reward_info
    assert honest.reward_info["rewards"] == {"correct": 0.0, "brief": 1.0}
    for door in POISONS:
        poisoned = results[door]
        assert poisoned.outcome is Outcome.ok, (door, poisoned.error)  # it ran, scored itself
        t = results[f"after-{door}"]
        assert (t.outcome, t.reward) == (Outcome.ok, 0.5), (door, t.reward_info)
        assert t.reward_info["rewards"] == {"correct": 0.0, "brief": 1.0}, door
        assert t.reward_info["weights"] == {"correct": 1.0, "brief": 0.5}, door
