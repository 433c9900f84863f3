"""Singularity/Apptainer runtime: the HPC backend, driving the ``apptainer`` CLI.

One sandbox is one named instance (``agentroll-<sandbox id>``)::

    apptainer instance start --containall --no-mount home,cwd,bind-paths,hostfs --cleanenv
        --env-file <file> --pid-file <file> [--fakeroot] [--net --network none]
        (--writable-tmpfs | --overlay <path>) --bind <socket dir>:/run/agentroll:rw
        --bind <workspace>:<workdir>:rw [--bind src:dest:ro ...] <image> agentroll-<id>
    apptainer exec --cleanenv --env-file <file> --pwd <workdir> instance://agentroll-<id>
        python -m agentroll.runtime.action --single-client --rlimit ...  (owned, long-lived)
    apptainer instance stop --timeout <s> agentroll-<id>             (then --force)

``instance start`` daemonizes, so its output goes to a file, never a pipe. Starts pass two
admission gates (per image, per node) so hundreds of simultaneous starts do not become a mount
storm. Teardown does not trust ``instance stop``: the instance's runtime parent and its FUSE
helpers leave the launcher's process group, so afterwards /proc is searched for this sandbox's
markers (environment marker, instance name on the command line, the instance's PID namespace)
and anything found is killed.

The action server joins the instance, so it is not its PID namespace's init: it guards itself
as far as an ordinary process of the container's user can (action/guard.py), but the agent can
kill it, and can ptrace it where the agent holds capabilities in the container (``--fakeroot``).
``exec`` refuses (``SandboxClosed``) once a pidfd on the instance's process reports it dead.

A spec with network is refused (``SandboxStartError``): without root, Apptainer can only share
the node's network, which would let the agent reach the server and the inference fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentroll.runtime import hostroot, procs
from agentroll.runtime.base import SandboxSpec
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.errors import RuntimeUnavailable, SandboxClosed, SandboxStartError
from agentroll.runtime.inithandle import InitHandle
from agentroll.runtime.lease import Lease
from agentroll.runtime.limits import prlimit_argv
from agentroll.runtime.sandbox import ProcessSandbox, open_log, spawn
from agentroll.runtime.sandbox_inside import (
    DEFAULT_PATH,
    SOCKET_DIR_INSIDE,
    action_server_argv,
    marker_env,
    sandbox_env,
)

if TYPE_CHECKING:
    from agentroll.runtime.config import SingularityConfig

log = logging.getLogger(__name__)

INSTANCE_PREFIX = "agentroll-"


def detect_binary(configured: str | None) -> str:
    """The configured CLI, else ``apptainer``, else ``singularity`` from PATH."""
    for name in [configured] if configured else ["apptainer", "singularity"]:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeUnavailable(
        f"{configured or 'apptainer/singularity'} not found: install Apptainer or set "
        "SingularityConfig.binary"
    )


def instance_name(sandbox_id: str) -> str:
    return INSTANCE_PREFIX + sandbox_id


def env_file_text(env: dict[str, str]) -> str:
    """Apptainer evaluates --env-file as shell assignments: quote every value."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


def instance_start_argv(
    binary: str,
    config: SingularityConfig,
    spec: SandboxSpec,
    *,
    image: Path,
    name: str,
    socket_dir: Path,
    workspace: Path,
    env_file: Path,
    pid_file: Path,
    python_dirs: Sequence[str] = (),
) -> list[str]:
    argv = [
        binary, "instance", "start", "--containall",
        "--no-mount", "home,cwd,bind-paths,hostfs",
        "--cleanenv", "--env-file", str(env_file), "--pid-file", str(pid_file),
    ]  # fmt: skip
    if config.fakeroot:
        argv.append("--fakeroot")
    if not spec.network and config.network_isolation:
        argv += ["--net", "--network", "none"]
    if config.overlay is not None:
        argv += ["--overlay", str(config.overlay)]
    elif config.writable_tmpfs:
        argv.append("--writable-tmpfs")
    for d in spec.scratch:
        argv += ["--scratch", d]
    binds = [f"{socket_dir}:{SOCKET_DIR_INSIDE}:rw", f"{workspace}:{spec.workdir}:rw"]
    binds += [f"{d}:{d}:ro" for d in python_dirs]
    binds += [f"{b.host}:{b.dest}:{'ro' if b.ro else 'rw'}" for b in spec.binds]
    for b in binds:
        argv += ["--bind", b]
    return [*argv, str(image), name]


def exec_argv(
    binary: str, *, name: str, env_file: Path, workdir: str, argv: Sequence[str]
) -> list[str]:
    return [
        binary, "exec", "--cleanenv", "--env-file", str(env_file), "--pwd", workdir,
        f"instance://{name}", *argv,
    ]  # fmt: skip


def instance_stop_argv(
    binary: str, name: str, *, timeout_s: float, force: bool = False
) -> list[str]:
    if force:
        return [binary, "instance", "stop", "--force", name]
    return [binary, "instance", "stop", "--timeout", str(max(int(timeout_s), 1)), name]


class SingularitySandbox(ProcessSandbox):
    binary: str
    name: str
    env_file: Path
    cli_env: dict[str, str]
    stop_timeout_s: float = 10.0
    #: The instance's own process (from --pid-file); None where it could not be read.
    instance: InitHandle | None = None

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        # Apptainer finds the instance by the pid it recorded: refuse once that process died.
        if self.instance is not None and not self.instance.alive:
            raise SandboxClosed(f"sandbox {self.id} is gone: its instance process has exited")
        return exec_argv(
            self.binary, name=self.name, env_file=self.env_file, workdir=self.spec.workdir,
            argv=[*prlimit_argv(self.spec.limits), *argv],
        )  # fmt: skip

    def exec_env(self) -> dict[str, str]:
        return self.cli_env

    def cmdline_marker(self) -> bytes | None:
        return self.name.encode()

    async def _terminate_extra(self, grace_s: float) -> None:
        await stop_instance(
            self.binary,
            self.name,
            self.cli_env,
            self.base_dir / "log",
            timeout_s=min(self.stop_timeout_s, max(grace_s, 1.0)),
        )

    async def _release(self) -> None:
        if self.instance is not None:
            self.instance.close()
        await super()._release()


async def run_cli(argv: Sequence[str], env: dict[str, str], log_path: Path, limit_s: float) -> int:
    """Run one CLI command, output appended to ``log_path`` (the CLI may daemonize)."""
    with open_log(log_path) as logf:
        try:
            proc = await spawn(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=logf,
                env=env, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxStartError(f"cannot run {argv[0]}: {exc}") from exc
    try:
        async with asyncio.timeout(limit_s):
            return await proc.wait()
    except BaseException:
        procs.kill_led_group(proc)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
        raise


async def stop_instance(
    binary: str, name: str, env: dict[str, str], log_path: Path, *, timeout_s: float
) -> None:
    """``instance stop``, escalating to ``--force``; errors are logged, the scan follows."""
    try:
        rc = await run_cli(
            instance_stop_argv(binary, name, timeout_s=timeout_s), env, log_path, timeout_s + 5
        )
        if rc != 0:
            await run_cli(
                instance_stop_argv(binary, name, timeout_s=0, force=True), env, log_path, 10
            )
    except (TimeoutError, SandboxStartError) as exc:
        log.warning("instance stop %s failed: %s", name, exc)


class SingularityRuntime(BaseRuntime):
    name = "singularity"

    def __init__(self, config: SingularityConfig, *, instance_id: str | None = None) -> None:
        super().__init__(config, instance_id=instance_id)
        self.config = config
        self.binary = detect_binary(config.binary)
        self._node_gate = asyncio.Semaphore(config.max_starts_per_node)
        self._image_gates: dict[str, asyncio.Semaphore] = {}
        if not config.network_isolation:
            log.warning(
                "singularity: network_isolation is off: every sandbox shares this node's "
                "network, so agents can reach this server and any inference server on the node"
            )

    def _needs_address(self, spec: SandboxSpec) -> bool:
        # Without network isolation every instance shares the host's ports.
        return not self.config.network_isolation

    def _cli_env(self, sandbox_id: str) -> dict[str, str]:
        env = {"PATH": DEFAULT_PATH, "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
        env.update(self.config.cli_env)
        env.update(marker_env(sandbox_id, self.instance_id))
        return env

    def _image(self, spec: SandboxSpec) -> Path:
        image = spec.image or self.config.default_image
        if image is None:
            raise SandboxStartError("singularity needs an image (spec.image or default_image)")
        return image

    def _create(
        self, sandbox_id: str, spec: SandboxSpec, base: Path, lease: Lease, address: str | None
    ) -> ProcessSandbox:
        sb = SingularitySandbox(
            sandbox_id=sandbox_id, spec=spec, base_dir=base, workdir=base / "work",
            address=address, lease=lease, scanner=self.scanner,
        )  # fmt: skip
        sb.binary = self.binary
        sb.name = instance_name(sandbox_id)
        sb.env_file = base / "env"
        sb.cli_env = self._cli_env(sandbox_id)
        sb.stop_timeout_s = self.config.stop_timeout_s
        return sb

    async def _boot(self, sandbox: ProcessSandbox, deadline: float) -> None:
        assert isinstance(sandbox, SingularitySandbox)
        sb, spec = sandbox, sandbox.spec
        if spec.network:
            # Apptainer's own networks (CNI bridges) need root or setuid, and without them an
            # instance shares the node's network: its loopback, the server, the inference fleet.
            raise SandboxStartError(
                "the singularity runtime refuses sandboxes with network: the instance would "
                "share the node's network (its loopback, this server, the inference servers); "
                "run tasks that need the internet on the bwrap runtime, which gives each sandbox "
                "its own network namespace behind user-mode NAT"
            )
        loop = asyncio.get_running_loop()
        image = self._image(spec)
        env = sandbox_env(spec, sb.id, self.instance_id, sb.address)
        fd = os.open(sb.env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(env_file_text(env))
        pid_file = sb.base_dir / "instance.pid"
        python = self.config.python or (
            hostroot.python_executable() if self.config.host_python else "python3"
        )
        argv = instance_start_argv(
            self.binary, self.config, spec, image=image, name=sb.name, socket_dir=sb.socket_dir,
            workspace=sb.base_dir / "work", env_file=sb.env_file, pid_file=pid_file,
            python_dirs=hostroot.python_dirs() if self.config.host_python else (),
        )  # fmt: skip
        self.record(sb)  # the lease names the instance before it exists
        gate = self._image_gates.setdefault(
            str(image), asyncio.Semaphore(self.config.max_starts_per_image)
        )
        async with gate, self._node_gate:
            rc = await run_cli(argv, sb.cli_env, sb.base_dir / "log", deadline - loop.time())
        if rc != 0:
            raise SandboxStartError(f"instance start failed (exit {rc}): {sb.log_tail()}")
        try:
            instance_pid = int(pid_file.read_text().split()[0])
            inode = procs.pidns_of(instance_pid)
            sb.instance = InitHandle(instance_pid, inode)
            sb.pidns = procs.PidNamespace.of(instance_pid, inode) if inode is not None else None
        except (OSError, ValueError, IndexError):
            log.warning("sandbox %s: no readable pid file from instance start", sb.id)
        command = action_server_argv(python, spec.workdir, spec.limits)
        await sb.launch(
            exec_argv(
                self.binary, name=sb.name, env_file=sb.env_file, workdir=spec.workdir, argv=command
            ),
            sb.cli_env,
        )
        self.record(sb)
        await sb.wait_ready(max(deadline - loop.time(), 0.1))

    async def _reap_extra(self, lease: Lease) -> None:
        name = instance_name(lease.sandbox_id)
        log_path = self.state.sandbox_dir(lease.sandbox_id) / "log"
        if not log_path.parent.exists():
            log_path = Path(os.devnull)
        await stop_instance(
            self.binary, name, self._cli_env(lease.sandbox_id), log_path, timeout_s=1
        )
