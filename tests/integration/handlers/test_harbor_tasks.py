"""The three bundled Harbor tasks, end to end: each environment built rootless from its
Dockerfile (buildah, `FROM` a base built here from Debian packages), run in bubblewrap, solved
by a scripted policy through bash, and attacked by one that forges the reward file, leaves a
process rewriting it, or plants its own tests — which earns 0 or the real score, never the
forged one. A verifier that writes no reward, or a malformed one, is `infra_error` with the
test output; one that outruns its time limit scores 0."""

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules, job, write
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.support.images import CACHE
from tests.support.task_images import BUILD_TIMEOUT_S, needs_task_build, task_bases

from agentroll.handlers.builtin.harbor import source
from agentroll.server.schema import JobState, Outcome

# On a machine without cached images the first test builds the bases, then the task images:
# minutes each on 2 cores, past pytest's default limit; the builds have their own timeouts.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(2 * BUILD_TIMEOUT_S),
    *needs_task_build,
]

BUNDLED = source.bundled_tasks()
FIXED_STATS = (BUNDLED["fix-script"] / "solution" / "solve.sh").read_text()
# Forged rewards, written where the verifier writes (and where Harbor's would read them).
FORGE = (
    "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
    """echo '{"reward": 1, "lines": 1, "words": 1, "longest_word": 1}' """
    "> /logs/verifier/reward.json"
)
REWRITER = (
    "setsid nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    """ echo '{"reward": 1}' > /logs/verifier/reward.json; sleep 0.05; done' >/dev/null 2>&1 &"""
)
PLANTED = write("/tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n") + (
    " && chmod 000 /tests /logs"
)
HONEST_REPORT = write("/app/report.json", '{"lines": 4, "words": 25, "longest_word": "rollout"}\n')
# The agent's working directory is its HOME: Python code planted in the user site there must
# not run inside the verifier's own python3.
USER_SITE_FORGERY = write(
    "/app/.local/lib/python3.11/site-packages/forge.pth",
    """import os; os.write(1, b'{"reward": 1.0}\\n'); os._exit(0)\n""",
)
PARTIAL_REPORT = write("/app/report.json", '{"lines": 4, "words": 25, "longest_word": "x"}\n')

# (task, attack): (commands, expected reward)
CASES: dict[tuple[str, str], tuple[list[str], float]] = {
    ("hello-file", "honest"): (["echo 'Hello, Harbor!' > /app/greeting.txt"], 1.0),
    ("hello-file", "forge"): ([FORGE], 0.0),
    ("hello-file", "rewriter"): ([REWRITER], 0.0),
    ("hello-file", "planted-tests"): ([PLANTED], 0.0),
    ("fix-script", "honest"): ([FIXED_STATS], 1.0),
    ("fix-script", "rewriter"): ([REWRITER], 0.0),
    ("word-stats", "honest"): ([HONEST_REPORT], 1.0),
    ("word-stats", "partial-and-forge"): ([PARTIAL_REPORT, FORGE, REWRITER], 0.6667),
    ("word-stats", "user-site"): ([USER_SITE_FORGERY], 0.0),
}
# The policy solves the task; the verifier is what is broken.
BROKEN_VERIFIERS = {
    "no-reward": "echo 'tests ran, reward forgotten'\n",
    "garbage-reward": "echo 'tests: all good' > /logs/verifier/reward.txt\n",
    "hangs": "echo started; sleep 600\n",
}


def task_copy(tmp_path: Path, name: str, attack: str, test_sh: str | None = None) -> Path:
    """A bundled task whose instruction names the scripted attack (its environment, and so
    its image, unchanged); with `test_sh`, a verifier of our own."""
    root = tmp_path / "tasks" / f"{name}-{attack}"
    shutil.copytree(BUNDLED[name], root)
    instruction = root / "instruction.md"
    instruction.write_text(f"{instruction.read_text()}\n[scripted attack: {attack}]\n")
    if test_sh is not None:
        (root / "tests" / "test.sh").write_text(test_sh)
        toml = root / "task.toml"
        toml.write_text(toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = 10.0"))
    return root


def harbor_job(job_id: str, root: Path) -> dict[str, Any]:
    return job(job_id, "harbor", {"path": str(root)})


@pytest.fixture(scope="module")
def bases() -> None:
    task_bases(CACHE)


async def test_bundled_tasks_are_solved_and_never_forged(
    bases: None, agentroll_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(source.CACHE_ENV, str(CACHE))
    attacks = {f"{t}.{a}": commands for (t, a), (commands, _) in CASES.items()}
    attacks.update(
        {name: ["echo 'Hello, Harbor!' > /app/greeting.txt"] for name in BROKEN_VERIFIERS}
    )
    jobs = [harbor_job(f"{t}.{a}", task_copy(tmp_path, t, f"{t}.{a}")) for t, a in CASES]
    jobs += [
        harbor_job(name, task_copy(tmp_path, "hello-file", name, test_sh))
        for name, test_sh in BROKEN_VERIFIERS.items()
    ]
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=1500)

    for (task, attack), (_, expected) in CASES.items():
        t = results[f"{task}.{attack}"]
        assert (task, attack, t.outcome, t.reward) == (task, attack, Outcome.ok, expected), t.error
        assert t.reward_info["format"] == "harbor"
        assert t.reward_info["verifier"]["timed_out"] is False
        harbor = t.metadata["harbor"]
        assert harbor["task"].startswith(task) and harbor["image"]["name"]
    stats = results["word-stats.partial-and-forge"].reward_info
    assert stats["source"] == "reward.json"
    assert stats["scores"] == {"lines": 1.0, "words": 1.0, "longest_word": 0.0, "reward": 0.6667}
    assert json.loads(results["word-stats.honest"].reward_info["verifier"]["output_tail"]) == {
        "lines": 1.0, "words": 1.0, "longest_word": 1.0, "reward": 1.0,
    }  # fmt: skip
    # One image per task environment, whatever the instruction says.
    images = {t.metadata["harbor"]["image"]["name"] for t in results.values()}
    assert len(images) == 3, images

    for name in ("no-reward", "garbage-reward"):
        t = results[name]
        assert (name, t.outcome, t.reward) == (name, Outcome.infra_error, None)
        assert t.error is not None and t.error.type == "verifier_failed"
    assert "reward forgotten" in (results["no-reward"].error.message or "")
    assert "not a number" in (results["garbage-reward"].error.message or "")
    hung = results["hangs"]
    assert (hung.outcome, hung.reward, hung.reward_info["reason"]) == (
        Outcome.ok, 0.0, "verifier_timeout",
    )  # fmt: skip
    assert "started" in hung.reward_info["verifier"]["output_tail"]


HELLO = "echo 'Hello, Harbor!' > /app/greeting.txt"
SLOW_VERIFIER = "sleep 5\n" + (BUNDLED["hello-file"] / "tests" / "test.sh").read_text()
DEADLINE_S = 130.0  # EVAL keeps a 90 s margin: waiting ~40 s leaves the old clip 1-2 s


async def test_a_job_the_server_kept_waiting_still_gets_its_whole_verifier(
    bases: None, agentroll_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One RUN worker: `waited` sits ~40 s in the RUN queue behind `blocker`, so its deadline
    leaves EVAL less than its margin plus the verifier's 5 s. That time was the server's:
    the verifier still gets its 10 s limit and the right answer scores 1 (clipped to what the
    deadline left, it used to score 0). `dawdled` spent the same time itself (`sleep 40` in
    RUN): its verifier gets only what the deadline leaves, and a verifier cut short is a 0."""
    monkeypatch.setenv(source.CACHE_ENV, str(CACHE))
    attacks = {"blocker": ["sleep 40", HELLO], "waited": [HELLO], "dawdled": ["sleep 40", HELLO]}
    jobs = {name: harbor_job(name, task_copy(tmp_path, "hello-file", name, SLOW_VERIFIER))
            for name in attacks}  # fmt: skip
    for name in ("waited", "dawdled"):
        jobs[name]["limits"] = {"deadline_s": DEADLINE_S}
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend, pools={"run": 1}) as client,
    ):
        await client.submit([jobs["blocker"]])
        async with asyncio.timeout(2 * BUILD_TIMEOUT_S):  # its INIT may build the image
            while (await client.job("blocker")).state is not JobState.run:
                await asyncio.sleep(0.2)
        for name in ("waited", "dawdled"):  # in this order: `waited` is next in line for RUN
            await client.submit([jobs[name]])
            async with asyncio.timeout(60):
                while (await client.job(name)).state in (JobState.queued, JobState.init):
                    await asyncio.sleep(0.2)
        results = await client.wait_for(list(jobs), 300)

    blocker, waited, dawdled = results["blocker"], results["waited"], results["dawdled"]
    assert (blocker.outcome, blocker.reward) == (Outcome.ok, 1.0), blocker.error
    assert (waited.outcome, waited.reward) == (Outcome.ok, 1.0), (waited.error, waited.reward_info)
    assert waited.timing.run is not None and waited.timing.run.queue_s > 30
    assert waited.reward_info["verifier"]["timed_out"] is False
    assert (dawdled.outcome, dawdled.reward, dawdled.reward_info["reason"]) == (
        Outcome.ok, 0.0, "verifier_timeout",
    )  # fmt: skip


def terminal_bench_1_task(tmp_path: Path, attack: str) -> Path:
    """A self-made Terminal-Bench 1 task: `task.yaml`, a Dockerfile at the top, `run-tests.sh`
    running pytest (the image's agentroll venv has it: no network needed) on tests/."""
    root = tmp_path / "tb1" / attack
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text(
        "instruction: |\n  Write hi to /app/hello.txt.\n"
        f"  [scripted attack: {attack}]\nmax_agent_timeout_sec: 300\nmax_test_timeout_sec: 120\n"
    )
    (root / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    (root / "run-tests.sh").write_text(
        "#!/bin/bash\n/opt/agentroll/bin/python -m pytest -p no:cacheprovider -rA "
        "$TEST_DIR/test_outputs.py\n"
    )
    (root / "tests" / "test_outputs.py").write_text(
        "from pathlib import Path\n\n\ndef test_hello_file_exists():\n"
        "    assert Path('/app/hello.txt').exists()\n\n\ndef test_hello_file_says_hi():\n"
        "    assert Path('/app/hello.txt').read_text().strip() == 'hi'\n"
    )
    return root


async def test_terminal_bench_1_task_is_graded_from_the_pytest_summary(
    bases: None, agentroll_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(source.CACHE_ENV, str(CACHE))
    attacks = {
        "tb1-right": ["echo hi > /app/hello.txt"],
        "tb1-wrong": ["echo bye > /app/hello.txt"],
    }
    jobs = [harbor_job(a, terminal_bench_1_task(tmp_path, a)) for a in attacks]
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs, timeout_s=900)
    right, wrong = results["tb1-right"], results["tb1-wrong"]
    assert (right.outcome, right.reward) == (Outcome.ok, 1.0), right.error
    assert right.reward_info["format"] == "terminal-bench-1"
    assert set(right.reward_info["tests"].values()) == {"PASSED"}
    assert (wrong.outcome, wrong.reward) == (Outcome.ok, 0.0), wrong.error
    by_name = {k.rsplit("::", 1)[-1]: v for k, v in wrong.reward_info["tests"].items()}
    assert by_name == {"test_hello_file_exists": "PASSED", "test_hello_file_says_hi": "FAILED"}
