"""Attack: a reply that a verifiers environment's reward code executes (a code task's grader
runs the completion) rewrites the grader's own code in its worker, so that every later
rollout the same warm worker scores earns a reward it did not (the policy's text persisting
across rollouts). Doors: the task class's method, and a builtin the reward calls. Beside
them, the honest control: the same wrong reply scored before and after earns its own
reward, 0.5 (wrong, but brief), both times."""

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.server.schema import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PACKAGE = str(Path(__file__).resolve().parents[1] / "fixtures" / "verifiers_env_pkg")
SPEC = {"taskset": "agentroll-vf-echo", "packages": [PACKAGE], "score_timeout_s": 120}
POISONS = {
    "patch-class": (
        "import agentroll_vf_echo as m; m.EchoTask._checked = lambda self, trace: self.data.answer"
    ),
    "patch-builtin": "import builtins; builtins.float = lambda value=0: 1.0",
}


def job(job_id: str, reply: str, answer: str) -> dict[str, Any]:
    task = {"id": job_id, "prompt": f"Repeat after me: {reply}", "answer": answer}
    return {
        "job_id": job_id,
        "handler": "verifiers",
        "instance": {"environment": SPEC, "task": task},
    }


@pytest.mark.parametrize("door", sorted(POISONS))
async def test_a_reply_the_grader_runs_cannot_change_how_later_rollouts_are_scored(
    agentroll_server: ServerFactory, tmp_path: Path, door: str
) -> None:
    async with (
        scripted_backend(wrong_rate=0.0, policy="echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        # One at a time, so the later ones are scored by the worker the poison ran in.
        before = await run_jobs(client, [job("before", "41", "42")], timeout_s=600)
        poison = await run_jobs(client, [job("poison", f"EXEC:{POISONS[door]}", "1")], 600)
        after = await run_jobs(client, [job("after", "41", "42")], timeout_s=600)

    assert poison["poison"].outcome is Outcome.ok  # it ran, and scored itself
    for name, t in (("before", before["before"]), ("after", after["after"])):
        assert (t.outcome, t.reward) == (Outcome.ok, 0.5), (name, t.reward_info)
        assert t.reward_info["rewards"] == {"correct": 0.0, "brief": 1.0}, name
