"""`swe`: resolve a GitHub-style issue in a real repository; the repository's tests decide.

Task instance (the SWE-bench format; SWE-Gym and R2E-Gym rows map onto it):

    {"instance_id": "textkit-1",
     "repo": "agentroll-examples/textkit",
     "base_commit": "84b9701d...",
     "problem_statement": "slugify() produces doubled separators ...",
     "FAIL_TO_PASS": ["tests/test_slug.py::test_punctuation_collapses_to_one_separator"],
     "PASS_TO_PASS": ["tests/test_slug.py::test_simple_words", ...],
     "test_patch": "diff --git a/tests/test_slug.py ...",   # hidden tests, applied at EVAL
     "image": null,                 # a sandbox image (.sif / rootfs dir); null: host root
     "repo_source": null,           # git repo inside the sandbox to clone; null: bundled repo
     "setup_cmd": null,             # run after checkout (e.g. `pip install -e .`)
     "workdir": "/testbed",
     "test_cmd": "python -m pytest -rA -p no:cacheprovider --tb=no -q",
     "eval_mode": "fresh",          # or "same": run the tests in the agent's sandbox
     "test_timeout_s": 300,
     "agent": {...}}                # AgentConfig overrides (tools, max_turns, ...)

FAIL_TO_PASS / PASS_TO_PASS may be JSON strings, as in the SWE-bench datasets. Extra fields
(`patch`, `version`, `hints_text`, ...) are accepted and ignored: the agent sees only the
problem statement and the repository.

INIT checks the repository out at `base_commit` in the sandbox. RUN is the agent loop with
`bash`, `str_replace_editor` and `submit`. EVAL takes the agent's diff (`git diff` against
`base_commit`, new files included) from the RUN sandbox, then -- in a fresh sandbox with a
fresh checkout (default) or in the RUN sandbox -- applies it, resets the files the test patch
touches, applies the test patch and runs FAIL_TO_PASS + PASS_TO_PASS. Reward 1.0 only if
every one of them passes. The diff is the trajectory's `patch` artifact.

Outcomes: a diff that does not apply, failing or hanging tests, a broken repository: reward
0 (the agent's doing). A checkout, test patch or test runner that cannot work: `infra_error`.
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentroll.handlers.agent import DEFAULT_LIMITS, ToolAgentHandler
from agentroll.handlers.builtin import swe_repo
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox, SandboxSpec

SYSTEM_PROMPT = (
    "You are an expert software engineer. You work in a sandbox with a git checkout of a "
    "repository. Explore it with bash, reproduce the issue, fix it with the smallest change to "
    "the source (not the tests) using str_replace_editor, check your fix, then call submit."
)
DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider --tb=no -q"


class SweInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(..., min_length=1, max_length=256)
    repo: str = Field(..., min_length=1, max_length=256)
    base_commit: str = Field(..., pattern=r"^[0-9a-f]{7,40}$")
    problem_statement: str = Field(..., min_length=1, max_length=200_000)
    FAIL_TO_PASS: list[str] = Field(..., min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    test_patch: str = ""
    image: str | None = None
    repo_source: str | None = None
    setup_cmd: str | None = None
    workdir: str = "/testbed"
    test_cmd: str = DEFAULT_TEST_CMD
    eval_mode: Literal["fresh", "same"] = "fresh"
    test_timeout_s: float = Field(300.0, gt=0, le=7200)
    agent: dict[str, Any] | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return swe_repo.as_list(value)

    @model_validator(mode="after")
    def _has_source(self) -> "SweInstance":
        bundled = swe_repo.bundled_repos().get(self.repo)
        if self.repo_source is None:
            if bundled is None:
                raise ValueError(
                    f"repository {self.repo!r} is not bundled; give repo_source (a git "
                    "repository inside the sandbox image) to clone it from"
                )
            if not bundled.base_commit.startswith(self.base_commit):
                raise ValueError(
                    f"bundled {self.repo} is at {bundled.base_commit}, not {self.base_commit}"
                )
        return self


@dataclass(frozen=True, slots=True)
class SweTask:
    instance: dict[str, Any]
    script: dict[str, Any]
    """How the scripted policy acts the fix out (never shown to the policy under training)."""

    @property
    def id(self) -> str:
        return str(self.instance["instance_id"])


@cache
def load_swe_tasks() -> tuple[SweTask, ...]:
    """The bundled instances (`data/swe/tasks.jsonl`) with their scripted solutions."""
    root = resources.files("agentroll.handlers.builtin").joinpath("data/swe")
    scripts = json.loads(root.joinpath("scripts.json").read_text("utf-8"))
    rows = [json.loads(x) for x in root.joinpath("tasks.jsonl").read_text("utf-8").splitlines()]
    return tuple(SweTask(row, scripts[row["instance_id"]]) for row in rows if row)


class SweHandler(ToolAgentHandler):
    name = "swe"
    instance_model = SweInstance
    system_prompt = SYSTEM_PROMPT
    default_tools = ("bash", "str_replace_editor", "submit")
    eval_sandbox = "reuse"  # the agent's diff is read from the RUN sandbox, whatever eval_mode

    @staticmethod
    def task(ctx: RolloutContext) -> SweInstance:
        cached = ctx.state.get("swe_instance")
        if not isinstance(cached, SweInstance):
            cached = SweInstance.model_validate(dict(ctx.instance))
            ctx.state["swe_instance"] = cached
        return cached

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        task = self.task(ctx)
        image = Path(task.image) if task.image else None
        return SandboxSpec(
            image=image, workdir=task.workdir, limits=DEFAULT_LIMITS, label=ctx.job_id
        )

    def task_prompt(self, ctx: RolloutContext) -> str:
        task = self.task(ctx)
        return (
            f"<issue>\n{task.problem_statement}\n</issue>\n\n"
            f"The repository {task.repo} is checked out at {task.workdir} (commit "
            f"{task.base_commit[:12]}). Resolve the issue by editing the source files; the "
            "tests that check it are not part of the repository yet. Call submit when done."
        )

    async def _checkout(self, sandbox: Sandbox, task: SweInstance) -> None:
        await swe_repo.checkout(
            sandbox,
            repo=task.repo,
            base_commit=task.base_commit,
            repo_source=task.repo_source,
            setup_cmd=task.setup_cmd,
        )

    async def prepare(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        await self._checkout(ctx.sandbox, self.task(ctx))

    async def eval(self, ctx: RolloutContext) -> Reward:
        task = self.task(ctx)
        if ctx.sandbox is None:
            raise InfraError("the RUN sandbox is gone; cannot read the diff", cause="no_sandbox")
        patch = await swe_repo.agent_diff(ctx.sandbox, task.base_commit)
        if patch is None:
            return Reward(0.0, {"resolved": False, "reason": "the repository is broken"})
        ctx.state["patch"] = patch
        info: dict[str, Any] = {"eval_mode": task.eval_mode, "patch_bytes": len(patch)}
        if task.eval_mode == "fresh":
            sandbox = await ctx.open_sandbox(self.sandbox_spec(ctx))
            await self._checkout(sandbox, task)
            if patch.strip():
                applied = await swe_repo.apply(sandbox, patch)
                if applied.exit_code != 0:
                    reason = f"the patch does not apply: {applied.stderr.strip()[-300:]}"
                    return Reward(0.0, {**info, "resolved": False, "reason": reason})
        else:
            sandbox = ctx.sandbox
        if task.test_patch:
            await swe_repo.restore(
                sandbox, task.base_commit, swe_repo.patched_files(task.test_patch)
            )
            applied = await swe_repo.apply(sandbox, task.test_patch)
            if applied.exit_code != 0:
                raise InfraError(
                    f"the test patch does not apply: {applied.stderr.strip()[-300:]}",
                    cause="test_patch_failed",
                )
        ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        run = await swe_repo.run_tests(sandbox, task.test_cmd, ids, timeout_s=task.test_timeout_s)
        f2p, p2p = run.summary(task.FAIL_TO_PASS), run.summary(task.PASS_TO_PASS)
        resolved = not f2p["failure"] and not p2p["failure"] and not run.timed_out
        info.update(
            resolved=resolved,
            FAIL_TO_PASS=f2p,
            PASS_TO_PASS=p2p,
            tests_exit_code=run.exit_code,
            tests_timed_out=run.timed_out,
        )
        if not resolved:
            info["tests_output_tail"] = run.output_tail[-1000:]
        return Reward(1.0 if resolved else 0.0, info)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        patch = ctx.state.get("patch")
        if isinstance(patch, str):
            out["artifacts"] = {"patch": patch}
        return out
