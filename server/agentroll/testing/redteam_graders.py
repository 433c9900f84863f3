"""One red-team batch against graders: the policy breaks its verifier, judge or remote verifier.

Through the real `agentroll serve` (`redteam.run_batch`), with bubblewrap sandboxes for Harbor
tasks, a scripted judge model with a small context on a backend of its own, and the fake
resources server (in this process: a remote service to the server). Every attack has an honest
control beside it that earns its reward, and each grader has a case broken for everyone,
whose control fails too: that one alone is `infra_error`.
"""

import shutil
from pathlib import Path
from typing import Any, NamedTuple

from agentroll.handlers.builtin.harbor import source
from agentroll.server.schema import Outcome
from agentroll.server.serving import start_in_loop
from agentroll.testing import redteam
from agentroll.testing.fake_resources_server import FakeResourcesServer, create_app
from agentroll.testing.scripted_llm.rules.redteam_graders import HARBOR_STATS, RULE

POLICY = f"{RULE},{redteam.POLICY}"
JUDGE_CONTEXT_TOKENS = 1024
JUDGES = {
    "judge": (
        ["--policy", "judge", "--max-model-len", str(JUDGE_CONTEXT_TOKENS), "--wrong-rate", "0"],
        {"tags": ["judge"], "policy": "judge"},
    )
}
NO_REWARD_EVER = "echo 'tests ran, reward forgotten'\n"


class Expected(NamedTuple):
    outcome: Outcome
    reward: float | None
    why: str
    """`reward_info.reason` of a scored rollout; the error type of an `infra_error`."""


def judge_task(name: str, question: str = "What is the capital of France?") -> dict[str, Any]:
    return {
        "question": f"[redteam-judge:{name}] {question}",
        "reference": "Paris",
        "judge": {"max_tokens": 64},
    }


def remote_task(said: str, fake: str | None = None) -> dict[str, Any]:
    """The policy (the `echo` rule) answers `said`; the row expects 42. The verifier's URL is
    filled in once the fake server listens."""
    row: dict[str, Any] = {
        "responses_create_params": {"input": f"Repeat after me: {said}"},
        "expected_answer": "42",
        **({"fake": fake} if fake else {}),
    }
    return {"verifier": {"url": "http://unset", "timeout_s": 3.0}, "row": row}


def harbor_task(tasks: Path, name: str, attack: str, test_sh: str | None = None) -> dict[str, Any]:
    """A copy of the bundled `fix-script` task whose instruction names the attack."""
    root = tasks / name
    shutil.copytree(source.bundled_task("fix-script"), root)
    instruction = root / "instruction.md"
    instruction.write_text(f"{instruction.read_text()}\n[redteam-harbor:{attack}]\n")
    if test_sh is not None:
        (root / "tests" / "test.sh").write_text(test_sh)
    return {"path": str(root)}


JUDGE_LONG_QUESTION = "What is the capital of France? Background: " + "lorem ipsum " * 400
"""A question too long for the judge's context whatever the answer: broken for everyone."""
EXPECTED: dict[str, Expected] = {
    "judge_honest": Expected(Outcome.ok, 1.0, "judged"),
    "judge_format_injection": Expected(Outcome.ok, 0.0, "judge_unparseable"),
    "judge_overflow": Expected(Outcome.ok, 0.0, "judge_context_overflow"),
    "judge_broken_for_everyone": Expected(Outcome.infra_error, None, "judge_context_overflow"),
    "remote_honest": Expected(Outcome.ok, 1.0, ""),
    "remote_hang": Expected(Outcome.ok, 0.0, "verifier_failed_on_answer"),
    "remote_crash": Expected(Outcome.ok, 0.0, "verifier_failed_on_answer"),
    "remote_broken_for_everyone": Expected(Outcome.infra_error, None, "verifier_http_error"),
    "harbor_honest": Expected(Outcome.ok, 1.0, ""),
    "harbor_detached_rewriter": Expected(Outcome.ok, 0.0, "verifier_disrupted"),
    "harbor_test_sh_killer": Expected(Outcome.ok, 0.0, "verifier_disrupted"),
    "harbor_kill_all": Expected(Outcome.ok, 0.0, "verifier_disrupted"),
    "harbor_reward_dir_swap": Expected(Outcome.ok, 0.0, "verifier_failed_on_answer"),
    # The test script's own reward.txt, written after the tests: a verdict, nothing to blame.
    "harbor_reward_json_planter": Expected(Outcome.ok, 0.0, ""),
    "harbor_broken_for_everyone": Expected(Outcome.infra_error, None, "verifier_failed"),
}


def grader_attacks(tasks: Path, verifier_url: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every case of `EXPECTED`: (handler, instance)."""
    attacks: dict[str, tuple[str, dict[str, Any]]] = {
        "judge_honest": ("llm_judge", judge_task("honest")),
        "judge_format_injection": ("llm_judge", judge_task("format")),
        "judge_overflow": ("llm_judge", judge_task("overflow")),
        "judge_broken_for_everyone": ("llm_judge", judge_task("honest", JUDGE_LONG_QUESTION)),
        "remote_honest": ("remote_verify", remote_task("42")),
        "remote_hang": ("remote_verify", remote_task("fake:hang")),
        "remote_crash": ("remote_verify", remote_task("fake:status_500")),
        "remote_broken_for_everyone": ("remote_verify", remote_task("42", "status_500")),
        "harbor_honest": ("harbor", harbor_task(tasks, "honest", "honest")),
        "harbor_broken_for_everyone": (
            "harbor",
            harbor_task(tasks, "broken", "honest", NO_REWARD_EVER),
        ),
    }
    for name in HARBOR_STATS:
        attacks[f"harbor_{name}"] = ("harbor", harbor_task(tasks, name, name))
    for handler, instance in attacks.values():
        if handler == "remote_verify":
            instance["verifier"]["url"] = verifier_url
    return attacks


async def run_grader_batch(workdir: Path, images_dir: Path) -> redteam.BatchResult:
    """Every case of `EXPECTED` in one batch (Harbor images from `images_dir`)."""
    verifier = await start_in_loop(create_app(FakeResourcesServer()))
    try:
        attacks = grader_attacks(workdir / "tasks", verifier.url)
        return await redteam.run_batch(
            workdir,
            attacks,
            0,
            policy=POLICY,
            judges=JUDGES,
            env={source.CACHE_ENV: str(images_dir)},
        )
    finally:
        await verifier.stop()
