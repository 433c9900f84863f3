"""A Harbor control run that the rollout's own time cut short is never kept as the task's
verdict: kept, it would make every later verifier the policy breaks on that task `infra_error`
(resampled) instead of 0. A policy that spends its deadline leaves EVAL a short wall-clock
backstop, under which a verifier that waits (a server starting, a busy node) times out."""

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.integration.runtime.rt_support import make_config

from agentroll.handlers.builtin.control import ControlResult
from agentroll.handlers.builtin.harbor.blame import control_run
from agentroll.handlers.builtin.harbor.task import load_task
from agentroll.handlers.builtin.harbor.verify import RUN_RESERVE_S, SCRATCH
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox, SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.runtime.cpulimit import GradingUsage, grading_usage

pytestmark = pytest.mark.integration
VERIFIER_CPU_S = 2
# Little CPU, more wall time than the CPU limit: what a verifier waiting on a server does.
WAITING_TEST_SH = "sleep 4\necho 1 > /logs/verifier/reward.txt\n"


@pytest.fixture
async def bwrap(tmp_path: Path) -> AsyncIterator[BwrapRuntime]:
    rt = make_config("bwrap", Path(tmp_path / "state")).build()
    assert isinstance(rt, BwrapRuntime)
    yield rt
    await rt.close()


def _task(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "instruction.md").write_text("Nothing to do.\n")
    (root / "task.toml").write_text(
        f'version = "1.0"\n[verifier]\ntimeout_sec = {VERIFIER_CPU_S}\n'
    )
    (root / "tests" / "test.sh").write_text(WAITING_TEST_SH)
    return root


async def _control(bwrap: BwrapRuntime, root: Path, stage_left_s: float) -> ControlResult:
    """The control of a task whose verifier waits 4 s, with `stage_left_s` left to grading."""
    task = load_task(_task(root))

    async def open_control() -> Sandbox:
        return await bwrap.start(SandboxSpec(scratch=SCRATCH), timeout=60)

    token = grading_usage.set(GradingUsage(deadline=time.monotonic() + stage_left_s))
    try:
        return await control_run(lambda: 3600.0, task, open_control, reward_key="reward")
    finally:
        grading_usage.reset(token)


async def test_a_control_timed_out_by_the_rollouts_deadline_is_not_kept(
    bwrap: BwrapRuntime, tmp_path: Path
) -> None:
    # 1 s past the verifier's reserve: the backstop is the CPU limit (2 s), the 4 s wait is
    # cut off by the rollout's time, not by the task.
    with pytest.raises(InfraError, match="ran out of the rollout's time") as info:
        await _control(bwrap, tmp_path / "task", RUN_RESERVE_S + 1)
    assert info.value.cause == "verifier_control_timeout"


async def test_a_control_with_its_usual_backstop_gets_the_tasks_verdict(
    bwrap: BwrapRuntime, tmp_path: Path
) -> None:
    result = await _control(bwrap, tmp_path / "task", 3600.0)
    assert (result.passed, result.detail) == (True, "on the untouched environment: reward 1")
