"""Harbor verifiers the agent's code attacks from inside the tests, blamed by a control.

`fix-script`'s tests run the agent's `stats.py`. A `stats.py` that leaves a detached process
rewriting the reward, that kills `test.sh` (no reward at all), or that kills every process it
can, earns 0 with the reason: the task's reference solution, run as the control, gets its
reward from the same verifier; one that plants a `reward.json` beside the test script's
`reward.txt` gets the test script's reward. A Terminal-Bench 1 verifier run as `python -m
pytest` from the working directory never imports a module the agent planted there. The infra
side: a verifier broken for everyone (the control fails too) is `infra_error`, and a task
whose own tests leave a process behind keeps its reward."""

from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.integration.handlers.test_harbor_tasks import (
    BUNDLED,
    FIXED_STATS,
    bases,  # noqa: F401 (a fixture)
    harbor_job,
    task_copy,
    terminal_bench_1_task,
)
from tests.support.images import CACHE
from tests.support.task_images import BUILD_TIMEOUT_S, needs_task_build

from agentroll.handlers.builtin.harbor import source
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm.rules.redteam_graders import HARBOR_STATS, harbor_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2 * BUILD_TIMEOUT_S), *needs_task_build]

ATTACKS = {name.replace("_", "-"): [harbor_command(name)] for name in ["honest", *HARBOR_STATS]}
EXPECTED_REASON = {
    "detached-rewriter": "verifier_disrupted",
    "test-sh-killer": "verifier_disrupted",  # it is still exiting when test.sh dies
    "kill-all": "verifier_disrupted",
    "reward-dir-swap": "verifier_failed_on_answer",  # test.sh ends, without a reward
}
FIX_SCRIPT_TESTS = (BUNDLED["fix-script"] / "tests" / "test.sh").read_text()
# The task's own test script is what breaks: nothing the policy does matters.
NO_REWARD_EVER = "echo 'tests ran, reward forgotten'\n"
# The task's own tests leave a process behind (a server they started, say).
LEAVES_A_DAEMON = FIX_SCRIPT_TESTS.replace("cd /app\n", "cd /app\n(setsid sleep 300 &)\n")
# Planted where `python -m pytest` runs: the module pytest itself, and one pytest imports.
FAKE_SUMMARY = (
    "print('=' * 20 + ' short test summary info ' + '=' * 20)\n"
    "print('PASSED tests/test_outputs.py::test_hello_file_exists')\n"
    "print('PASSED tests/test_outputs.py::test_hello_file_says_hi')\n"
    "import os\nos._exit(0)\n"
)
PLANTED = {
    "tb1-planted-pytest": [write("/app/pytest.py", FAKE_SUMMARY)],
    "tb1-planted-stdlib": [write("/app/pprint.py", FAKE_SUMMARY)],
}


async def test_the_agents_code_cannot_disrupt_its_verifier_into_a_reward_or_a_resample(
    bases: None,  # noqa: F811
    agentroll_server: ServerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(source.CACHE_ENV, str(CACHE))
    attacks = {f"fix-script.{a}": commands for a, commands in ATTACKS.items()}
    attacks |= {"broken-verifier": [FIXED_STATS], "task-daemon": [FIXED_STATS], **PLANTED}
    jobs = [harbor_job(name, task_copy(tmp_path, "fix-script", name)) for name in attacks
            if name.startswith("fix-script.")]  # fmt: skip
    for name, test_sh in (("broken-verifier", NO_REWARD_EVER), ("task-daemon", LEAVES_A_DAEMON)):
        jobs.append(harbor_job(name, task_copy(tmp_path, "fix-script", name, test_sh)))
    jobs += [harbor_job(name, terminal_bench_1_task(tmp_path, name)) for name in PLANTED]
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=1500)

    honest = results["fix-script.honest"]
    assert (honest.outcome, honest.reward) == (Outcome.ok, 1.0), honest.error
    assert honest.reward_info["verifier"]["frozen"] is True
    assert honest.reward_info["verifier"]["disrupted"] is None
    for attack, reason in EXPECTED_REASON.items():
        t = results[f"fix-script.{attack}"]
        info = t.reward_info
        assert (attack, t.outcome, t.reward, info.get("reason")) == (
            attack, Outcome.ok, 0.0, reason,
        ), (t.error, info)  # fmt: skip
        assert info["control"]["passed"] is True and info["control"]["answer"] == (
            "reference solution"
        )
        assert info["control"]["detail"] == "on the reference solution: reward 1"
    rewriter = results["fix-script.detached-rewriter"].reward_info
    assert "outlived the test script" in rewriter["verifier"]["disrupted"]
    killer = results["fix-script.test-sh-killer"].reward_info
    assert killer["verifier"]["exit_code"] == 137 and "wrote no" in killer["failure"]
    swapped = results["fix-script.reward-dir-swap"].reward_info
    assert swapped["verifier"]["disrupted"] is None and "wrote no" in swapped["failure"]
    killed = results["fix-script.kill-all"].reward_info
    assert "own shell was killed" in killed["verifier"]["disrupted"]
    # The test script's reward.txt, written after the tests, is read, not the planted file.
    planter = results["fix-script.reward-json-planter"]
    assert (planter.outcome, planter.reward) == (Outcome.ok, 0.0), planter.error
    assert planter.reward_info["source"] == "reward.txt"

    broken = results["broken-verifier"]
    assert (broken.outcome, broken.reward) == (Outcome.infra_error, None)
    assert broken.error is not None and broken.error.type == "verifier_failed"
    assert "control answer too" in broken.error.message
    assert "reward forgotten" in broken.error.message
    daemon = results["task-daemon"]
    assert (daemon.outcome, daemon.reward) == (Outcome.ok, 1.0), (daemon.error, daemon.reward_info)
    assert "outlived" in daemon.reward_info["verifier"]["disrupted"]

    for name in PLANTED:
        t = results[name]
        assert (name, t.outcome, t.reward) == (name, Outcome.ok, 0.0), (t.error, t.reward_info)
        assert t.reward_info["source"] == "pytest summary"
        assert "FAILED" in t.reward_info["tests"].values()
