"""The built-in task handlers end to end: scripted policies that use the tools, real
bubblewrap sandboxes, real rewards. Right solutions score 1, wrong ones 0, broken
infrastructure is `infra_error` (never 0)."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.handlers import HandlerRegistry, Reward, RolloutContext
from agentroll.handlers.builtin.code import CodeHandler, load_code_tasks
from agentroll.handlers.builtin.math import MathHandler, load_math_tasks
from agentroll.handlers.builtin.stem import load_stem_tasks
from agentroll.handlers.builtin.swe import SweHandler, load_swe_tasks
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]


def every_family(prefix: str = "") -> list[dict[str, Any]]:
    """One job per handler and mode: math and stem with and without tools, a function and a
    program `code` task, and every bundled `swe` repository."""
    math, stem, code = load_math_tasks(), load_stem_tasks(), load_code_tasks()
    jobs = [
        ("math-plain", "math", math[0].instance()),
        ("math-tools", "math", math[2].instance(tools=True)),
        ("stem-plain", "stem", stem[0].instance()),
        ("stem-tools", "stem", stem[1].instance(tools=True)),
        ("code-function", "code", code[0].instance()),
        ("code-program", "code", code[4].instance()),
        *((f"swe-{t.id}", "swe", t.instance) for t in load_swe_tasks()),
    ]
    return [
        {"job_id": f"{prefix}{job_id}", "handler": h, "instance": inst, "sampling": {"seed": 1}}
        for job_id, h, inst in jobs
    ]


async def test_reference_solutions_score_one(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with (
        scripted_backend(wrong_rate=0.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, every_family())
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.ok, 1.0), t.error
    assert results["math-plain"].timing.tool_calls == 0  # the no-tool path stays tool-free
    assert results["math-tools"].metadata["tool_calls"] == {"python": 1, "submit": 1}
    assert results["code-program"].reward_info["pass_fraction"] == 1.0
    swe = results["swe-ledger-1"]
    assert swe.finish_reason == "submit" and swe.num_turns == 6
    assert swe.reward_info["FAIL_TO_PASS"]["failure"] == []
    assert "+    sign = " in swe.artifacts["patch"]  # the agent's diff comes back as an artifact
    assert swe.timing.tool_calls == 6 and swe.timing.tool_s > 0


async def test_wrong_solutions_score_zero(agentroll_server: ServerFactory, tmp_path: Path) -> None:
    async with (
        scripted_backend(wrong_rate=1.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, every_family())
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.ok, 0.0), t.error
    assert (
        results["stem-plain"].reward_info["predicted"] != results["stem-plain"].reward_info["gold"]
    )
    code = results["code-function"].reward_info
    assert 0 < code["passed"] < code["total"] and code["pass_fraction"] == code["passed"] / 6
    swe = results["swe-intervals-1"].reward_info
    assert swe["resolved"] is False and swe["FAIL_TO_PASS"]["failure"]


class SandboxDiesBeforeEval:
    """Mixin: the sandbox is gone when EVAL starts, as after a node failure."""

    async def eval(self, ctx: RolloutContext) -> Reward:
        assert ctx.sandbox is not None
        await ctx.sandbox.stop()
        return await super().eval(ctx)  # type: ignore[misc]


class BrokenMath(MathHandler):
    """The sandbox dies right after INIT: the agent's first tool call cannot run."""

    name = "broken-math"

    async def init(self, ctx: RolloutContext) -> None:
        await super().init(ctx)
        assert ctx.sandbox is not None
        await ctx.sandbox.stop()


class BrokenCode(SandboxDiesBeforeEval, CodeHandler):
    name = "broken-code"


class BrokenSwe(SandboxDiesBeforeEval, SweHandler):
    name = "broken-swe"


async def test_infrastructure_failures_are_infra_error_not_zero(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    registry = HandlerRegistry()
    for cls in (BrokenMath, BrokenCode, BrokenSwe):
        registry.register(cls)
    swe = load_swe_tasks()[0].instance
    jobs = [
        {
            "job_id": "math",
            "handler": "broken-math",
            "instance": load_math_tasks()[1].instance(tools=True),
        },
        {"job_id": "code", "handler": "broken-code", "instance": load_code_tasks()[1].instance()},
        {"job_id": "swe", "handler": "broken-swe", "instance": swe},
        {  # a repository source that is not there: the checkout fails in INIT
            "job_id": "swe-no-repo",
            "handler": "swe",
            "instance": {**swe, "repo_source": "/nonexistent/repo.git"},
        },
        {  # a test command that is not pytest: found before the agent's diff is applied
            "job_id": "swe-no-runner",
            "handler": "swe",
            "instance": {**swe, "test_cmd": "python -m no_such_runner"},
        },
        {  # the same, found in INIT when the tests run in the agent's sandbox
            "job_id": "swe-no-runner-same",
            "handler": "swe",
            "instance": {**swe, "test_cmd": "true", "eval_mode": "same"},
        },
    ]
    async with (
        scripted_backend(wrong_rate=0.0) as backend,
        rollout_service(agentroll_server, tmp_path, backend, registry) as client,
    ):
        results = await run_jobs(client, jobs)
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.infra_error, None)
        assert t.error is not None
    assert results["math"].error.stage == "run"  # type: ignore[union-attr]
    assert results["code"].error.stage == "eval"  # type: ignore[union-attr]
    no_repo = results["swe-no-repo"].error
    assert no_repo is not None and (no_repo.type, no_repo.stage) == ("repo_setup_failed", "init")
    assert "/nonexistent/repo.git" in no_repo.message
    for job_id, stage in (("swe-no-runner", "eval"), ("swe-no-runner-same", "init")):
        no_runner = results[job_id].error
        assert no_runner is not None and no_runner.type == "test_runner_failed"
        assert (job_id, no_runner.stage) == (job_id, stage)
    assert "no_such_runner" in results["swe-no-runner"].error.message  # type: ignore[union-attr]


async def test_failing_llm_backend_is_infra_error_for_answer_tasks(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    jobs = [
        {"job_id": "stem", "handler": "stem", "instance": load_stem_tasks()[2].instance()},
        {
            "job_id": "stem-tools",
            "handler": "stem",
            "instance": load_stem_tasks()[3].instance(tools=True),
        },
        {"job_id": "math", "handler": "math", "instance": load_math_tasks()[3].instance()},
    ]
    async with (
        scripted_backend(wrong_rate=0.0, fail_rate=1.0) as backend,  # every generation: HTTP 500
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        results = await run_jobs(client, jobs)
    for job_id, t in results.items():
        assert (job_id, t.outcome, t.reward) == (job_id, Outcome.infra_error, None)
        assert t.error is not None and t.error.type.startswith("llm_backend"), t.error
