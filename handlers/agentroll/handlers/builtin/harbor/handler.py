"""`harbor`: Harbor task folders (and Terminal-Bench 1 ones), built rootless and verified honestly.

Task instance (exactly one of `path`, `bundled`, `archive`):

    {"path": "/data/tasks/fix-the-build",   # a task folder on the server's machine
     "bundled": "hello-file",               # or a task shipped with agentroll
     "archive": "<base64 .tar.gz>",         # or the task folder, uploaded
     "reward_key": "reward",                # which score of reward.json is the reward
     "image": null,                         # a prebuilt rootfs under the image cache
     "agent": {...}}                        # AgentConfig overrides (tools, max_turns, ...)

The folder is read and checked at submission (`task.py`). INIT builds its environment from
its Dockerfile with buildah, rootless, into a root filesystem (cached by content: the first
rollout of a task pays for the build, the others reuse it; `agentroll build-task-image`
builds ahead), starts a bubblewrap sandbox on it with the task's limits and network setting,
and fills the working directory with what the image holds there. RUN is the built-in agent
loop (`bash`, `str_replace_editor`, `submit`) on `instruction.md`, for at most
`[agent].timeout_sec`; the `harness` handler runs any harness preset on these tasks instead
(`"evaluator": "harbor"`). EVAL is `verify.py`: the agent's processes gone, fresh `/tests`
and `/logs/verifier`, the task's test script (its processes frozen the moment it exits,
`containment.py`), Harbor's reward files; a verifier that failed or was disrupted is blamed
by the task's control run (`blame.py`).

Writable for the agent: the working directory (a tmpfs of `[environment].storage_mb`, default
1 GiB, kept within `memory_mb`), `/tmp`, `/logs`; the rest of the image is read-only under
bubblewrap, so a task whose agent must install system packages needs them in its Dockerfile.
`[environment].cpus` is recorded, not enforced. Under Apptainer with a writable overlay the
image root is writable for the agent: use bubblewrap for untrusted policies.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentroll.handlers.agent import AgentConfig, ToolAgentHandler
from agentroll.handlers.agent.handler import DEFAULT_LIMITS, MiB
from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.harbor import source
from agentroll.handlers.builtin.harbor.blame import blame
from agentroll.handlers.builtin.harbor.task import (
    DEFAULT_WORKDIR,
    Environment,
    HarborTask,
    TaskFormatError,
    load_task,
)
from agentroll.handlers.builtin.harbor.verify import SCRATCH, VerifierFailed, verify
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Bind, Limits, Sandbox, SandboxSpec
from agentroll.runtime.imagemeta import read_image_meta
from agentroll.runtime.images.dockerfile import TaskImage, build_task_image
from agentroll.runtime.images.errors import ImageError

SYSTEM_PROMPT = (
    "You are an autonomous agent in a Linux environment. Complete the task with the tools "
    "you have: run commands, read and edit files. When the task is done, call `submit`."
)
SEED_DIR = "/run/agentroll-seed"
"""Where the image's own working directory is visible (read-only) while INIT copies it."""
SEED_TIMEOUT_S = 120.0
EVAL_MARGIN_S = 90.0
"""EVAL time kept for emptying /tests and /logs, copying the tests, stopping what they
started and reading the reward, beside the verifier's own limit."""


class HarborInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    bundled: str | None = None
    archive: str | None = Field(None, min_length=1)
    reward_key: str = Field("reward", min_length=1, max_length=200)
    image: str | None = None
    agent: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> HarborInstance:
        given = [k for k in ("path", "bundled", "archive") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, bundled, archive (got {given or 'none'})")
        return self


def resolve_task(spec: HarborInstance) -> HarborTask:
    """The task folder the instance names, read and checked (`TaskFormatError` if unusable)."""
    if spec.path is not None:
        root = source.task_path(spec.path)
    elif spec.bundled is not None:
        root = source.bundled_task(spec.bundled)
    else:
        assert spec.archive is not None
        root = source.unpacked_archive(spec.archive)
    return load_task(root)


async def build_environment(
    env: Environment, *, images_dir: Path, timeout_s: float, pull: bool = False
) -> TaskImage:
    """The task's image, built from its Dockerfile (or `docker_image`), or found cached."""
    return await build_task_image(
        env.context,
        dockerfile=env.dockerfile,
        docker_image=env.docker_image,
        images_dir=images_dir,
        pull=pull,
        timeout_s=timeout_s,
    )


def prebuilt_image(text: str) -> Path:
    """A root filesystem from the image cache (`agentroll harbor-image`): never any other
    folder of the server's machine, which would become the sandbox's root."""
    cache = source.cache_dir().resolve()
    path = Path(text).expanduser().resolve()
    if not (path.is_relative_to(cache) and path != cache and path.is_dir()):
        raise TaskFormatError(f"image must be a root filesystem under the image cache {cache}")
    return path


class HarborHandler(ToolAgentHandler):
    name = "harbor"
    instance_model = HarborInstance
    eval_sandbox = "reuse"  # Harbor's verifier sees the agent's container: verify.py cleans up
    system_prompt = SYSTEM_PROMPT
    default_tools = ("bash", "str_replace_editor", "submit")

    def validate_instance(self, instance: dict[str, Any]) -> None:
        super().validate_instance(instance)
        spec = HarborInstance.model_validate(instance)
        resolve_task(spec)  # TaskFormatError is a ValueError
        if spec.image is not None:
            prebuilt_image(spec.image)

    def spec(self, ctx: RolloutContext) -> HarborInstance:
        return parsed_instance(ctx, HarborInstance, "harbor_instance")

    def task(self, ctx: RolloutContext) -> HarborTask:
        task = ctx.state.get("harbor_task")
        if not isinstance(task, HarborTask):
            task = ctx.state["harbor_task"] = resolve_task(self.spec(ctx))
        return task

    def task_prompt(self, ctx: RolloutContext) -> str:
        return self.task(ctx).instruction

    def agent_config(self, ctx: RolloutContext) -> AgentConfig:
        timeout = self.task(ctx).agent_timeout_s
        base = self.default_config.merged({"wall_time_s": timeout} if timeout else None)
        overrides = ctx.instance.get("agent")
        return base.merged(overrides if isinstance(overrides, dict) else None)

    async def set_up(self, ctx: RolloutContext, agent: Agent) -> None:
        ctx.state["harbor_image"] = await self._image(ctx)
        await super().set_up(ctx, agent)

    async def _image(self, ctx: RolloutContext) -> TaskImage | Path:
        prebuilt = self.spec(ctx).image
        if prebuilt is not None:
            return prebuilt_image(prebuilt)
        env = self.task(ctx).environment
        timeout = min(env.build_timeout_s, max(1.0, ctx.time_left()))
        try:
            return await build_environment(env, images_dir=source.cache_dir(), timeout_s=timeout)
        except ImageError as exc:
            raise InfraError(f"the task's image did not build: {exc}", cause="image_build") from exc

    def sandbox_spec(self, ctx: RolloutContext) -> SandboxSpec:
        task, image = self.task(ctx), ctx.state["harbor_image"]
        root = image.path if isinstance(image, TaskImage) else image
        workdir = task.environment.workdir or self._image_workdir(image) or DEFAULT_WORKDIR
        seed = (root / workdir.lstrip("/")).resolve()
        # A link in the image (`/app -> /`) must not reach the host's own folders.
        inside = seed.is_relative_to(root.resolve())
        binds = (Bind(host=seed, dest=SEED_DIR),) if inside and seed.is_dir() else ()
        ctx.state["harbor_seeded"] = bool(binds)
        return SandboxSpec(
            image=root,
            workdir=workdir,
            binds=binds,
            scratch=SCRATCH,
            env=task.environment.env,
            limits=self._limits(task),
            network=task.environment.network,
            label=ctx.job_id,
        )

    @staticmethod
    def _image_workdir(image: TaskImage | Path) -> str | None:
        if isinstance(image, TaskImage):
            return image.workdir
        return read_image_meta(image).workdir if image.is_dir() else None

    @staticmethod
    def _limits(task: HarborTask) -> Limits:
        """`memory_mb` bounds the sandbox's memory as a whole (not each process's address space,
        which JVM or Go test runners reserve freely); the tmpfs folders count against it, so the
        workspace is kept small enough that a full one still leaves the verifier room."""
        env, limits = task.environment, DEFAULT_LIMITS
        memory = limits.max_total_memory_bytes or 0
        if env.memory_mb is not None:
            memory = max(256, env.memory_mb) * MiB
        workspace = env.storage_mb * MiB if env.storage_mb else limits.workspace_bytes or 0
        room = memory - len(("/tmp", *SCRATCH)) * limits.tmp_bytes - 256 * MiB
        workspace = max(16 * MiB, min(workspace, room))
        return limits.model_copy(
            update={"max_total_memory_bytes": memory, "workspace_bytes": workspace}
        )

    async def prepare(self, ctx: RolloutContext) -> None:
        """Copy what the image holds in the working directory into the (empty) workspace."""
        sandbox = ctx.sandbox
        assert sandbox is not None
        await self._seed(ctx, sandbox)

    @staticmethod
    async def _seed(ctx: RolloutContext, sandbox: Sandbox) -> None:
        if not ctx.state.get("harbor_seeded"):
            return
        result = await sandbox.exec(
            ["sh", "-c", f"cp -a {shlex.quote(SEED_DIR)}/. ."], timeout=SEED_TIMEOUT_S
        )
        if result.exit_code != 0:
            raise InfraError(
                f"could not fill the working directory from the image: {result.stderr[-2000:]}",
                cause="workspace_seed",
            )

    async def _control_sandbox(self, ctx: RolloutContext) -> Sandbox:
        """A fresh sandbox of the task, as the agent's was before RUN (for `blame`)."""
        sandbox = await ctx.open_sandbox(self.sandbox_spec(ctx))
        await self._seed(ctx, sandbox)
        return sandbox

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        sandbox = ctx.sandbox
        assert sandbox is not None, "INIT opens the sandbox"
        task, spec = self.task(ctx), self.spec(ctx)
        started = time.monotonic()

        def eval_left() -> float:
            return min(ctx.time_left(), ctx.limits.eval_timeout_s - (time.monotonic() - started))

        try:
            reward = await verify(
                sandbox,
                task,
                time_limit=lambda: verifier_time(ctx, task),  # once the tests are in place
                reward_key=spec.reward_key,
            )
        except VerifierFailed as failure:
            return await blame(
                eval_left,
                task,
                failure,
                lambda: self._control_sandbox(ctx),
                reward_key=spec.reward_key,
                image=spec.image,
            )
        disrupted = reward.info.get("verifier", {}).get("disrupted")
        if disrupted is None:
            return reward
        return await blame(
            eval_left,
            task,
            VerifierFailed(f"the verifier was disrupted: {disrupted}"),
            lambda: self._control_sandbox(ctx),
            reward_key=spec.reward_key,
            image=spec.image,
            kept=reward,
        )

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        out = super().final_result(ctx)
        task = ctx.state.get("harbor_task")
        image = ctx.state.get("harbor_image")
        if isinstance(task, HarborTask):
            info: dict[str, Any] = {"task": task.name, "format": task.format}
            if isinstance(image, TaskImage):
                info["image"] = {"name": image.name, "reused": image.reused,
                                 "build_seconds": image.build_seconds}  # fmt: skip
            out["metadata"] = {**out.get("metadata", {}), "harbor": info}
        return out


def verifier_time(ctx: RolloutContext, task: HarborTask) -> float:
    """The verifier's time limit, taken once its tests are in place: the task's, kept inside
    the EVAL stage's and the job's.

    A hanging verifier should end on this limit (a 0: the agent's code hangs) before the stage
    or the job ends it (`timed_out`, no reward), so EVAL_MARGIN_S is kept inside both. The
    job's deadline shortens it only by the agent's time (RUN, and EVAL so far: stopping what
    the agent left, clearing what it wrote to /tests and /logs). Time the server took (queues,
    admission, INIT's image build) does not, so it never cuts a slow but passing test suite
    into a 0; when it leaves the verifier too little, the job's deadline ends EVAL as
    `timed_out`.
    """
    limits = ctx.limits
    agents_share = limits.deadline_s - ctx.agent_time()
    budget = min(limits.eval_timeout_s, agents_share) - EVAL_MARGIN_S
    return max(1.0, min(task.verifier_timeout_s, budget))
