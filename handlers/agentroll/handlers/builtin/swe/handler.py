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
     "test_cmd": "python -m pytest -rA -p no:cacheprovider --tb=no -q",   # must run pytest
     "log_parser": null,            # an official swebench parser: see "Graded by log" below
     "pytest_report": true,         # with log_parser: whether test_cmd runs pytest
     "eval_setup_cmd": null,        # run at EVAL before the tests (hidden tests not in a patch)
     "eval_mode": "fresh",          # or "same": run the tests in the agent's sandbox
     "test_timeout_s": 300,
     "allow_test_infra_changes": false,   # or true, or path patterns: see `swe_infra`
     "agent": {...}}                # AgentConfig overrides (tools, max_turns, ...)

FAIL_TO_PASS / PASS_TO_PASS may be JSON strings, as in the SWE-bench datasets. Extra fields
(`patch`, `version`, `hints_text`, ...) are accepted and ignored: the agent sees only the
problem statement and the repository.

INIT checks the repository out at `base_commit` in the sandbox, with that commit's ancestry
and no other history (`swe_repo.strip_history`; the image's own copy of a `repo_source` is
shown the same way, `swe_mirror`). RUN is the agent loop with
`bash`, `str_replace_editor` and `submit`. EVAL takes the agent's diff (`git diff` against
`base_commit`, new files included, at most 32 MiB) from the RUN sandbox, then grades it:

1. In a fresh sandbox with a fresh checkout (default), a probe checks that `test_cmd` runs
   pytest with the grader's report plugin (`swe_pytest`), before anything of the agent's is
   there. With `"eval_mode": "same"` the probe runs in INIT instead.
2. The test patch must apply to `base_commit` (checked on a private index).
3. The diff is applied to a private index of `base_commit`; a diff that touches the test
   setup (conftest.py, pytest configuration, plugins, start-up hooks: `swe_infra`) is
   refused unless the instance allows it, and so is one that adds a module named like one
   the sandbox's interpreter provides where pytest imports top-level names (`swe_shadow`,
   `shadows_module`). Only then is it applied to the worktree.
4. The files the test patch touches and every test file the diff touches (by name, or because
   it holds a listed test) are reset, the test patch is applied, and FAIL_TO_PASS +
   PASS_TO_PASS run under pytest, started from the grader's launcher (`swe_pytest`). Every one
   of them must be in the report and pass, and pytest's exit status must agree with the
   report (`swe_pytest.judge`).

   An `eval_setup_cmd` runs after the test patch, with the grader's git environment (e.g.
   `git checkout <rev> -- <test files>` for SWE-smith, whose tests a commit hides); if it
   fails on the agent's tree, reward 0.

Graded by log (`log_parser`, e.g. "parse_log_pytest", needs `agentroll[swebench]`; fresh
mode only): `test_cmd` is a whole script run by bash (no ids appended: it names its tests,
as the official eval scripts do), and the official parser reads its output; see `swe_log`
for what makes that output honest. `swe_datasets` writes such instances from SWE-bench rows.

Reward 1.0 only if all of that holds; otherwise 0 with `reason` (a short code) and `detail`
in `reward_info`. The diff is the trajectory's `patch` artifact.

The grader's own files live in a scratch tmpfs of every `swe` sandbox (`swe_repo`), emptied
once the agent's processes are stopped: a full `/tmp` or workspace cannot fail grading.

Outcomes: whatever the agent's diff causes (it does not apply, it touches the test setup, it
blocks the test patch, the tests fail, hang, crash, break collection or never let pytest
write its report) is reward 0. A checkout, test patch or test command that does not work
before the agent's diff is applied is `infra_error`.

`"eval_mode": "same"` is the weaker mode: the agent's sandbox, its git configuration and any
process it left running are still there while the tests run (such processes are stopped
before grading only where the runtime supports that), and the diff that is inspected is what
git reports in that sandbox. Use it where a fresh sandbox is too expensive, not for training
on untrusted policies.
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from agentroll.handlers.agent import DEFAULT_LIMITS, ToolAgentHandler
from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.sandbox_files import UnreadableFile
from agentroll.handlers.builtin.swe import (
    swe_infra,
    swe_log,
    swe_mirror,
    swe_official,
    swe_pytest,
    swe_repo,
    swe_shadow,
)
from agentroll.handlers.builtin.swe.swe_repo import Git, PrivateIndex
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Bind, Sandbox, SandboxSpec

SYSTEM_PROMPT = (
    "You are an expert software engineer. You work in a sandbox with a git checkout of a "
    "repository. Explore it with bash, reproduce the issue, fix it with the smallest change to "
    "the source (not the tests) using str_replace_editor, check your fix, then call submit."
)
DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider --tb=no -q"
HISTORY_FREE_GIT_DIR = "swe_history_free_git_dir"
"""`ctx.state` key: the host folder shown over the image's `<repo_source>/.git`."""
MODULE_NAMES = "swe_module_names"
"""`ctx.state` key: the INIT sandbox's module names (`"eval_mode": "same"`)."""


# A shell-style pattern for repository paths, as `swe_infra.is_allowed` matches them.
AllowedPath = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=r"^[^/]")]


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
    log_parser: str | None = Field(None, pattern=r"^parse_log_\w+$")
    pytest_report: StrictBool = True
    eval_setup_cmd: str | None = None
    eval_mode: Literal["fresh", "same"] = "fresh"
    test_timeout_s: float = Field(300.0, gt=0, le=7200)
    allow_test_infra_changes: StrictBool | Annotated[list[AllowedPath], Field(max_length=1000)] = (
        False
    )
    agent: dict[str, Any] | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return swe_repo.as_list(value)

    @model_validator(mode="after")
    def _log_grading(self) -> "SweInstance":
        if self.log_parser is None:
            if not self.pytest_report:
                raise ValueError("pytest_report: false needs a log_parser to read the output")
            return self
        if self.eval_mode != "fresh":
            raise ValueError('grading by log_parser needs eval_mode "fresh"')
        if not swe_official.installed():
            raise ValueError(f"log_parser needs the swebench package: {swe_official.INSTALL_HINT}")
        return self

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
    """The bundled instances (`data/tasks.jsonl`) with their scripted solutions."""
    root = resources.files("agentroll.handlers.builtin.swe").joinpath("data")
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
        return parsed_instance(ctx, SweInstance, "swe_instance")

    async def set_up(self, ctx: RolloutContext, agent: Agent) -> None:
        task = self.task(ctx)
        image = Path(task.image) if task.image else None
        source = swe_mirror.image_repository(image, task.repo_source)
        if source is not None:  # the image's own repository, without its later history
            git_dir = await swe_mirror.history_free_git_dir(source, task.base_commit)
            ctx.state[HISTORY_FREE_GIT_DIR] = str(git_dir)
        await super().set_up(ctx, agent)

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        task = self.task(ctx)
        image = Path(task.image) if task.image else None
        git_dir = ctx.state.get(HISTORY_FREE_GIT_DIR)
        binds: tuple[Bind, ...] = ()
        if git_dir is not None and task.repo_source is not None:
            binds = (Bind(host=Path(git_dir), dest=f"{task.repo_source.rstrip('/')}/.git"),)
        return SandboxSpec(
            image=image,
            workdir=task.workdir,
            binds=binds,
            scratch=(swe_repo.GRADER_SCRATCH,),
            limits=DEFAULT_LIMITS,
            label=ctx.job_id,
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
        task = self.task(ctx)
        await self._checkout(ctx.sandbox, task)
        if task.eval_mode == "same":  # the runner must work before the agent touches anything
            names = await self._probe(ctx.sandbox, task)
            ctx.state[MODULE_NAMES] = sorted(names)

    @staticmethod
    async def _probe(sandbox: Sandbox, task: SweInstance) -> frozenset[str]:
        """Check the test runner; the names the sandbox's interpreter provides (both before
        anything of the agent's is in the sandbox)."""
        if task.log_parser is None:
            await swe_pytest.probe(sandbox, task.test_cmd)
        elif task.pytest_report:
            await swe_log.probe(sandbox, task.test_cmd)
        return await swe_shadow.module_names(sandbox, task.test_cmd)

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        task = self.task(ctx)
        if ctx.sandbox is None:
            raise InfraError("the RUN sandbox is gone; cannot read the diff", cause="no_sandbox")
        # EVAL starts once the agent's processes are gone: what it left in the grader's
        # scratch goes, and the grader works there, never in the agent's /tmp or workspace.
        if not await swe_repo.clear_scratch(ctx.sandbox):
            detail = "what the agent left in the grader's scratch folder could not be removed"
            return _unresolved({}, "grader_scratch_blocked", detail)
        agent_git = await Git.isolated(ctx.sandbox)  # nothing of the agent's repository runs
        try:
            patch = await swe_repo.agent_diff(agent_git, task.base_commit)
        except UnreadableFile as exc:
            return _unresolved({}, "patch_too_large", str(exc))
        if patch is None:
            return _unresolved({}, "broken_repository", "git cannot read the agent's repository")
        ctx.state["patch"] = patch
        info: dict[str, Any] = {"eval_mode": task.eval_mode, "patch_bytes": len(patch)}
        if task.eval_mode == "fresh":
            sandbox = await ctx.open_sandbox(self.sandbox_spec(ctx))
            await self._checkout(sandbox, task)
            names = await self._probe(sandbox, task)
            git = Git.trusted(sandbox)
        else:
            sandbox, git = ctx.sandbox, agent_git
            known = ctx.state.get(MODULE_NAMES)  # INIT's, before the agent's changes
            names = (
                frozenset(known)
                if known is not None
                else await swe_shadow.module_names(sandbox, task.test_cmd)
            )
        index = await PrivateIndex.create(git, task.base_commit)
        if task.test_patch and (await index.apply("tests", task.test_patch)).exit_code != 0:
            raise InfraError(
                f"the test patch does not apply to {task.base_commit}", cause="test_patch_failed"
            )
        test_files = set(swe_repo.patched_files(task.test_patch))
        if patch.strip():
            refusal = await self._apply_agent_patch(git, index, task, patch, info, names)
            if isinstance(refusal, Reward):
                return refusal
            test_files.update(refusal)
        # Every test file the diff touched goes back to base_commit, not only the test patch's.
        await swe_repo.restore(git, task.base_commit, sorted(test_files))
        if task.test_patch:
            applied = await swe_repo.apply(git, task.test_patch)
            if applied.exit_code != 0:  # it applies to base_commit: the agent's changes block it
                detail = applied.stderr.strip()[-300:]
                return _unresolved(info, "test_patch_does_not_apply", detail)
        if task.eval_setup_cmd:
            done = await git.run(task.eval_setup_cmd)
            if done.exit_code != 0:
                detail = (done.stderr or done.stdout).strip()[-300:]
                return _unresolved(info, "eval_setup_failed", detail)
        verdict = await self._run_tests(sandbox, task)
        info.update(verdict.info)
        if not verdict.resolved:
            return _unresolved(info, verdict.reason, verdict.detail)
        return Reward(1.0, {**info, "resolved": True})

    @staticmethod
    async def _run_tests(sandbox: Sandbox, task: SweInstance) -> swe_pytest.Verdict:
        if task.log_parser is None:
            ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
            run = await swe_pytest.run_pytest(
                sandbox, task.test_cmd, ids, timeout_s=task.test_timeout_s
            )
            return swe_pytest.judge(run, task.FAIL_TO_PASS, task.PASS_TO_PASS)
        logged = await swe_log.run_logged(sandbox, task.test_cmd, timeout_s=task.test_timeout_s)
        statuses = None
        if not (logged.timed_out or logged.disrupted or logged.truncated):
            statuses = await swe_log.parse(
                task.log_parser,
                logged.output,
                instance_id=task.instance_id,
                repo=task.repo,
                version=str(getattr(task, "version", "") or ""),
            )
        verdict = swe_log.judge_log(
            logged, statuses, task.FAIL_TO_PASS, task.PASS_TO_PASS, pytest_report=task.pytest_report
        )
        verdict.info["log_parser"] = task.log_parser
        return verdict

    @staticmethod
    async def _apply_agent_patch(
        git: Git,
        index: PrivateIndex,
        task: SweInstance,
        patch: str,
        info: dict[str, Any],
        module_names: frozenset[str],
    ) -> Reward | list[str]:
        """Inspect the agent's patch on the private index, then (fresh mode) apply it to the
        worktree; the reward 0 if it does not apply, touches the test setup or shadows a
        module, else the test files it changes (to be reset)."""
        staged = await index.apply("agent", patch)
        if staged.exit_code != 0:
            return _unresolved(info, "patch_does_not_apply", staged.stderr.strip()[-300:])
        changes = await index.changes("agent")
        refused = await swe_infra.refused_changes(
            index, "agent", changes, task.allow_test_infra_changes
        )
        if refused:
            info["test_infrastructure_paths"] = refused
            detail = f"the diff changes the test setup: {', '.join(refused[:20])}"
            return _unresolved(info, "test_infrastructure_modified", detail)
        shadowing = await swe_shadow.shadowing_changes(index, "agent", module_names)
        if shadowing:
            info["shadowing_paths"] = shadowing
            detail = (
                "the diff adds modules named like the interpreter's own: "
                f"{', '.join(shadowing[:20])}"
            )
            return _unresolved(info, "shadows_module", detail)
        if task.eval_mode == "fresh":  # in "same" mode the worktree has it already
            applied = await swe_repo.apply(git, patch)
            if applied.exit_code != 0:
                return _unresolved(info, "patch_does_not_apply", applied.stderr.strip()[-300:])
        listed = swe_repo.listed_test_files([*task.FAIL_TO_PASS, *task.PASS_TO_PASS])
        return [c.path for c in changes if swe_repo.is_test_file(c.path) or c.path in listed]

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        patch = ctx.state.get("patch")
        if isinstance(patch, str):
            out["artifacts"] = {"patch": patch}
        return out


def _unresolved(info: dict[str, Any], reason: str, detail: str) -> Reward:
    return Reward(0.0, {**info, "resolved": False, "reason": reason, "detail": detail})
