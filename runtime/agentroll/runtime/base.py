"""The runtime protocol: what the server and handlers call, whatever the backend.

A ``Runtime`` starts ``Sandbox`` objects from a ``SandboxSpec``. Every sandbox runs the
in-sandbox action server (``python -m agentroll.runtime.action``) behind a Unix socket in its
own socket directory; ``Sandbox.tools`` is the client for it, the server's only client: once it
is connected the socket is gone, so nothing inside can reach the server. ``exec`` runs one argv
directly inside the sandbox (not through the tool shell), for setup and grading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from agentroll.runtime.action.client import ActionClient

#: Environment variable every sandbox process carries; teardown and the reaper look for it.
MARKER_ENV = "AGENTROLL_SANDBOX_ID"
#: Environment variable naming the server instance that owns the sandbox.
OWNER_ENV = "AGENTROLL_OWNER"

GiB = 1 << 30
MiB = 1 << 20


class Limits(BaseModel):
    """Resource limits of the agent's processes in the sandbox (None = no limit).

    They bind the agent's tools and every process they start, and commands run with ``exec``;
    never the action server itself, so an agent that exhausts them cannot end it. The per-process
    limits are rlimits. ``max_processes`` and ``max_total_memory_bytes`` hold for the sandbox as a
    whole where the server can create cgroups (running as root with writable ``pids``/``memory``
    controllers); otherwise ``max_processes`` is RLIMIT_NPROC, which counts every process of the
    sandbox's host uid, other sandboxes' included, and the total memory is not bounded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_processes: int | None = Field(256, ge=8, description="processes/threads in the sandbox")
    max_memory_bytes: int | None = Field(
        8 * GiB, ge=64 * MiB, description="address space per process"
    )
    max_total_memory_bytes: int | None = Field(
        8 * GiB, ge=64 * MiB, description="memory of all the agent's processes together (cgroup)"
    )
    max_file_size_bytes: int | None = Field(
        1 * GiB, ge=1, description="largest file a process may write"
    )
    cpu_time_s: int | None = Field(None, ge=1, description="CPU seconds per process")
    max_open_files: int | None = Field(4096, ge=64)
    #: Size of the workspace where the backend can enforce it (bwrap: a size-limited tmpfs that
    #: lives only inside the sandbox, so ``Sandbox.workdir`` is None). None: a host directory.
    workspace_bytes: int | None = Field(None, ge=1 * MiB)
    #: Size of the sandbox's private /tmp (a tmpfs, so it is memory).
    tmp_bytes: int = Field(256 * MiB, ge=1 * MiB)


class Bind(BaseModel):
    """A host path made visible inside the sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: Path
    dest: str
    ro: bool = True

    @field_validator("dest")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"bind destination must be an absolute path without '..': {v!r}")
        return v


class SandboxSpec(BaseModel):
    """Everything needed to start one sandbox. Frozen and hashable: the warm pool keys on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: None: the host root, read-only (system directories only, never /root, /home or /work);
    #: a directory: a root filesystem built by the image builder; for singularity also a .sif.
    image: Path | None = None
    binds: tuple[Bind, ...] = ()
    #: Extra empty, writable directories private to the sandbox (bwrap: a tmpfs of
    #: ``limits.tmp_bytes`` each; Apptainer: ``--scratch``), e.g. where a verifier writes.
    scratch: tuple[str, ...] = ()
    #: The complete environment of the sandbox. The server's own environment is never inherited.
    env: tuple[tuple[str, str], ...] = ()
    limits: Limits = Limits()
    #: bwrap: a network namespace of its own behind user-mode NAT (the internet, never the
    #: node; see netns.py); singularity refuses it.
    network: bool = False
    #: Working directory inside the sandbox (the writable workspace is mounted here).
    workdir: str = "/workspace"
    #: Free-form owner label (job or rollout id) recorded in the lease, for humans.
    label: str = ""

    @field_validator("env", mode="before")
    @classmethod
    def _env_items(cls, v: object) -> object:
        if isinstance(v, Mapping):
            return tuple(sorted((str(k), str(val)) for k, val in v.items()))
        return v

    @field_validator("scratch")
    @classmethod
    def _scratch_absolute(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for d in v:
            if not d.startswith("/") or ".." in d.split("/") or d.rstrip("/") == "":
                raise ValueError(f"scratch directory must be an absolute path below /: {d!r}")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir_absolute(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/") or v == "/":
            raise ValueError(f"workdir must be an absolute path below /: {v!r}")
        return v.rstrip("/")

    def pool_key(self) -> SandboxSpec:
        """The spec without its label: sandboxes with equal keys are interchangeable."""
        return self.model_copy(update={"label": ""})


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of ``Sandbox.exec``; output is decoded with errors="replace"."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    """Killed at its wall-clock limit, or at its CPU-time limit when it had one."""
    duration_s: float = 0.0
    cpu_s: float | None = None
    """CPU time it used, where it was measured (``cpu_limit_s`` in a cgroup); else None."""


@runtime_checkable
class Sandbox(Protocol):
    """One started sandbox. ``stop`` is idempotent and proves containment."""

    id: str
    spec: SandboxSpec
    socket_dir: Path
    #: Host path of the writable workspace; None when it lives only inside the sandbox.
    workdir: Path | None
    #: A loopback address of its own where sandboxes share the node's network (singularity
    #: without network isolation), else None.
    address: str | None

    @property
    def tools(self) -> ActionClient: ...

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,  # noqa: ASYNC109 (contract: the caller's limit, enforced inside)
        input: bytes | None = None,
        cpu_limit_s: float | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the sandbox, killed after ``timeout`` seconds of wall-clock time.

        ``cpu_limit_s``: also kill it once its processes used that much CPU time, counted in
        a cgroup of its own (the sandbox's CPU share raised meanwhile), so a busy node slows
        it down without timing it out; ``timeout`` is then a generous backstop. Where no
        cgroup can count it (a non-root server, Apptainer, ``local``), ``cpu_limit_s`` is a
        wall-clock limit too.
        """
        ...

    async def upload(self, path: str, data: bytes) -> None: ...

    async def download(self, path: str) -> bytes: ...

    async def stop_agent(self, *, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (contract)
        """Kill every process the agent started in the sandbox; return once all are gone.

        Everything but the action server dies: the tools' bash and Python kernel (the next tool
        call starts fresh ones), whatever they started, detached or not, and any ``exec`` still
        running. Call it before grading in the agent's sandbox, so tests run with no agent
        process alive. Raises ``SandboxError`` if a process outlives ``timeout``.
        """
        ...

    async def orphans_reaped(self) -> int | None:
        """How many processes of the sandbox outlived their parent so far, exited or not yet
        reaped included (a count that only grows); None where the sandbox has no PID namespace
        of its own with the action server as its init (`local`, Apptainer without `--pid`).

        Read before and after a step (after `stop_agent`, whose killed processes are orphans
        too): a larger count says something the step started outlived its parent, even if it
        has exited since.
        """
        ...

    async def stop(self, *, grace_s: float = 2.0) -> None: ...


@runtime_checkable
class Runtime(Protocol):
    """A sandbox backend (bwrap, singularity, local)."""

    name: str

    async def start(self, spec: SandboxSpec, *, timeout: float) -> Sandbox: ...  # noqa: ASYNC109 (contract)

    async def reap_orphans(self) -> int: ...

    async def close(self) -> None: ...
