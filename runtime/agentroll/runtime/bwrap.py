"""Bubblewrap runtime: unprivileged namespaces, the default on workstations and CI.

Each sandbox is ``bwrap --unshare-all`` in a new user namespace with every capability dropped
and nested user namespaces disabled, its own session, killed with its parent. Its root is a
tmpfs onto which the image's top-level directories are bound read-only (the host's system
directories by default, see hostroot.py); ``/proc``, ``/dev``, a size-limited ``/tmp``, the
writable workspace and the sandbox's own socket directory are mounted on top. A sandbox that
asks for network gets a network namespace of its own behind user-mode NAT, never the node's
(netns.py, usernat.py).

The action server is the PID namespace's init (``--as-pid-1``). The agent's tools run as the
same uid in the same namespace, so this is what keeps them from ending it: the kernel never
delivers SIGKILL or SIGSTOP to a namespace's init from inside it, nor any signal the init has
no handler for, and the init cannot be ptraced by a process without capabilities once it has
made itself non-dumpable (see action/guard.py). A nested PID namespace for the tools (an inner
bwrap) would hide the server as well, but needs bwrap inside every image and nested user
namespaces, which ``--disable-userns`` keeps closed as kernel attack surface.

Limits bind the agent's processes, never the server: it applies rlimits to its tools and moves
them into the sandbox's cgroups (cgroup.py) through descriptors it is handed at start; ``exec``
applies them with ``prlimit`` and joins the cgroups itself.

``exec`` joins the running sandbox's namespaces with ``nsenter`` under the sandbox uid, so a
command shares the workspace, /tmp and network of the action server. It enters them through a
handle on the init that a reused pid cannot impersonate (inithandle.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentroll.runtime import hostroot, procs, usernat
from agentroll.runtime.base import SandboxSpec
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.errors import RuntimeUnavailable, SandboxClosed, SandboxStartError
from agentroll.runtime.imagemeta import read_image_meta
from agentroll.runtime.inithandle import InitHandle
from agentroll.runtime.lease import Lease
from agentroll.runtime.limits import join_cgroup_argv, prlimit_argv
from agentroll.runtime.sandbox import ProcessSandbox, read_until_eof
from agentroll.runtime.sandbox_inside import (
    DEFAULT_PATH,
    SOCKET_DIR_INSIDE,
    action_server_argv,
    marker_env,
    sandbox_env,
)

if TYPE_CHECKING:
    from agentroll.runtime.config import BwrapConfig
    from agentroll.runtime.usernat import UserModeNat

log = logging.getLogger(__name__)

_SKIP_IMAGE_ENTRIES = {"proc", "dev", "sys", "tmp", "run"}


def root_args(image: Path | None) -> list[str]:
    """Mounts that make up the read-only root: host system dirs, or an image's top level."""
    args: list[str] = []
    if image is None:
        for kind, src, dest in hostroot.system_entries():
            args += ["--symlink", src, dest] if kind == "symlink" else ["--ro-bind", src, dest]
        for kind, path in hostroot.private_etc_entries():
            args += ["--ro-bind", "/dev/null", path] if kind == "file" else ["--tmpfs", path]
        return args
    try:
        entries = sorted(os.scandir(image), key=lambda e: e.name)
    except OSError as exc:
        raise SandboxStartError(f"image {image} is not a readable root filesystem: {exc}") from exc
    for entry in entries:
        if entry.name in _SKIP_IMAGE_ENTRIES:
            continue
        dest = f"/{entry.name}"
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), dest]
        else:
            args += ["--ro-bind", entry.path, dest]
    return args


def bwrap_argv(
    spec: SandboxSpec,
    *,
    bwrap: str,
    socket_dir: Path,
    workspace: Path | None,
    env: dict[str, str],
    command: list[str],
    info_fd: int,
    uid: int,
    python_dirs: tuple[str, ...] = (),
    resolv_conf: Path | None = None,
) -> list[str]:
    """The complete bwrap command line for ``spec`` (pure: unit-tested as is).

    With network, bwrap keeps the network namespace it is started in: the launcher's own,
    behind slirp4netns (usernat.py), never the server's.
    """
    argv = [bwrap, "--unshare-all"]
    if spec.network:
        argv.append("--share-net")
    argv += [
        "--unshare-user", "--disable-userns", "--uid", str(uid), "--gid", str(uid),
        "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--as-pid-1",
        "--info-fd", str(info_fd), "--hostname", "sandbox",
    ]  # fmt: skip
    argv += root_args(spec.image)
    if resolv_conf is not None:
        argv += ["--ro-bind", str(resolv_conf), "/etc/resolv.conf"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", *spec.scratch):
        argv += ["--size", str(spec.limits.tmp_bytes), "--tmpfs", d]
    # After the private /tmp: mounts apply in order, and an interpreter that lives under /tmp
    # (a checkout or venv there) would otherwise be hidden by it.
    for d in python_dirs:
        argv += ["--ro-bind", d, d]
    if workspace is None:
        assert spec.limits.workspace_bytes is not None
        argv += ["--size", str(spec.limits.workspace_bytes), "--tmpfs", spec.workdir]
    else:
        argv += ["--bind", str(workspace), spec.workdir]
    # Read-only inside: the host made every socket in it (the action server's is handed over
    # ready to serve), so nothing the agent runs can fill the host's disk through it.
    argv += ["--ro-bind", str(socket_dir), SOCKET_DIR_INSIDE]
    for b in spec.binds:
        argv += ["--ro-bind" if b.ro else "--bind", str(b.host), b.dest]
    # The root itself is a tmpfs: read-only, or writes outside the workspace would fill memory.
    argv += ["--remount-ro", "/", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", spec.workdir, "--", *command]
    return argv


class BwrapSandbox(ProcessSandbox):
    uid = 65534
    nsenter = "nsenter"
    #: The namespace's init: the action server.
    init: InitHandle | None = None
    #: The user-mode NAT of a sandbox with network.
    nat: UserModeNat | None = None
    env: dict[str, str]

    @contextlib.contextmanager
    def exec_command(
        self, argv: Sequence[str], cgroup: SandboxCgroup | None = None
    ) -> Iterator[list[str]]:
        if self.init is None:
            raise SandboxClosed(f"sandbox {self.id} has not started")
        joined = cgroup or self.cgroup
        with self.init.nsenter_options(self.id) as enter:
            yield [
                *join_cgroup_argv(joined.procs_files() if joined else []),
                self.nsenter, *enter, "-S", str(self.uid), "-G", str(self.uid),
                "--", *prlimit_argv(self.spec.limits), *argv,
            ]  # fmt: skip

    def exec_env(self) -> dict[str, str]:
        return self.env

    async def _terminate_extra(self, grace_s: float) -> None:
        if self.nat is not None:
            await self.nat.stop()

    def _kill_inner(self) -> None:
        # Killing the namespace's init kills every process in it; bwrap (its parent) reaps it.
        if self.init is not None:
            self.init.kill()

    async def _release(self) -> None:
        if self.init is not None:
            self.init.close()
        await super()._release()


class BwrapRuntime(BaseRuntime):
    name = "bwrap"

    def __init__(self, config: BwrapConfig, *, instance_id: str | None = None) -> None:
        super().__init__(config, instance_id=instance_id)
        self.config = config
        self.bwrap = _which(config.bwrap_path or "bwrap")
        self.nsenter = _which("nsenter")
        self._slirp: str | None = None  # looked up at the first sandbox with network
        self._warned_nproc = False

    def _host_workspace(self, spec: SandboxSpec) -> bool:
        return spec.limits.workspace_bytes is None

    def _needs_address(self, spec: SandboxSpec) -> bool:
        return False  # a sandbox with network has a network namespace, and ports, of its own

    def _python(self, spec: SandboxSpec) -> tuple[str, tuple[str, ...]]:
        host_python = (
            self.config.host_python if self.config.host_python is not None else (spec.image is None)
        )
        if host_python:
            return self.config.python or hostroot.python_executable(), hostroot.python_dirs()
        if self.config.python is None and spec.image is not None:
            return read_image_meta(Path(spec.image)).python, ()
        return self.config.python or "python3", ()

    def _create(
        self, sandbox_id: str, spec: SandboxSpec, base: Path, lease: Lease, address: str | None
    ) -> ProcessSandbox:
        workspace = base / "work" if self._host_workspace(spec) else None
        sb = BwrapSandbox(
            sandbox_id=sandbox_id, spec=spec, base_dir=base, workdir=workspace,
            address=address, lease=lease, scanner=self.scanner,
        )  # fmt: skip
        sb.uid = self.config.sandbox_uid
        sb.nsenter = self.nsenter
        image_env = read_image_meta(Path(spec.image)).env if spec.image is not None else None
        sb.env = sandbox_env(spec, sandbox_id, self.instance_id, address, image_env)
        if self._python(spec)[1] and "PATH" not in dict(spec.env):
            # The host venv's interpreter is bound in: let `python` and `pip` mean it.
            sb.env["PATH"] = f"{os.path.dirname(hostroot.python_executable())}:{DEFAULT_PATH}"
        return sb

    def _cgroup(self, sb: BwrapSandbox) -> None:
        if os.geteuid() != 0:
            return  # rlimits only; RLIMIT_NPROC is enforced for non-root users
        sb.cgroup = SandboxCgroup.create(sb.id, sb.spec.limits)
        if "pids" not in (sb.cgroup.dirs if sb.cgroup else {}) and not self._warned_nproc:
            self._warned_nproc = True
            log.warning(
                "bwrap: running as root without a writable pids cgroup: the process limit "
                "cannot be enforced (the kernel exempts uid 0 from RLIMIT_NPROC)"
            )

    def _slirp4netns(self) -> str:
        if self._slirp is None:
            self._slirp = usernat.tools(self.config.network)
        return self._slirp

    def _network_files(self, sb: BwrapSandbox) -> usernat.NetworkFiles | None:
        """What the launcher of a sandbox with network needs (None: no network)."""
        if not sb.spec.network:
            return None
        self._slirp4netns()  # refuse before anything is written if a tool is missing
        etc_resolv = Path(sb.spec.image or "/") / "etc" / "resolv.conf"
        dns = etc_resolv.is_file() and not etc_resolv.is_symlink()
        if not dns:
            log.warning("sandbox %s: %s is not a file: DNS is not configured", sb.id, etc_resolv)
        return usernat.write_files(sb.base_dir, self.config.network, dns=dns)

    async def _boot(self, sandbox: ProcessSandbox, deadline: float) -> None:
        assert isinstance(sandbox, BwrapSandbox)
        sb = sandbox
        spec = sb.spec
        self._cgroup(sb)
        python, pydirs = self._python(spec)
        # The server holds these to move its tools into the cgroups; it stays in ours.
        cgroup_fds = sb.cgroup.open_procs() if sb.cgroup else []
        listener = _listen(sb.socket_path)
        read_fd, write_fd = os.pipe()
        try:
            server = action_server_argv(
                python, spec.workdir, spec.limits, cgroup_fds, listen_fd=listener.fileno()
            )
            net = self._network_files(sb)
            argv = bwrap_argv(
                spec, bwrap=self.bwrap, socket_dir=sb.socket_dir, workspace=sb.workdir,
                env=sb.env, command=server, info_fd=write_fd, uid=self.config.sandbox_uid,
                python_dirs=pydirs, resolv_conf=net.resolv_conf if net else None,
            )  # fmt: skip
            launcher_env = {"PATH": DEFAULT_PATH, **marker_env(sb.id, self.instance_id)}
            fds = [write_fd, listener.fileno(), *cgroup_fds]
            if net is None:
                await sb.launch(argv, launcher_env, pass_fds=fds)
            else:
                sb.nat = await usernat.launch_networked(
                    sb, argv, launcher_env, pass_fds=fds, files=net,
                    slirp4netns=self._slirp4netns(), deadline=deadline,
                )  # fmt: skip
        except BaseException:
            os.close(read_fd)  # _read_info, which owns it otherwise, will not run
            raise
        finally:
            listener.close()  # the server holds its own copy
            for fd in (write_fd, *cgroup_fds):
                os.close(fd)
        info = await _read_info(read_fd, deadline)
        inode = info.get("pid-namespace")
        child = info.get("child-pid")
        if child is None:
            raise SandboxStartError(
                f"bwrap exited before starting sandbox {sb.id}: {sb.log_tail() or '(no output)'}"
            )
        sb.init = InitHandle(child, inode)
        sb.pidns = procs.PidNamespace.of(child, inode) if inode is not None else None
        self.record(sb)
        loop = asyncio.get_running_loop()
        await sb.wait_ready(max(deadline - loop.time(), 0.1))
        sb.socket_path.unlink(missing_ok=True)  # connected: nobody may ever connect again


def _listen(path: Path) -> socket.socket:
    """The action server's socket, bound and listening on the host (0600) before it starts."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)  # born 0600: no window where others can connect
        try:
            listener.bind(str(path))
        finally:
            os.umask(old_umask)
        listener.listen(4)
    except OSError as exc:
        listener.close()
        raise SandboxStartError(f"cannot listen on {path}: {exc}") from exc
    return listener


async def _read_info(fd: int, deadline: float) -> dict[str, int]:
    """bwrap's --info-fd JSON (empty if bwrap died before writing it)."""
    data = await read_until_eof(fd, deadline)
    try:
        return json.loads(data) if data else {}
    except ValueError as exc:
        raise SandboxStartError(f"bwrap wrote unreadable --info-fd data: {data!r}") from exc


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    if found is None:
        raise RuntimeUnavailable(
            f"{name} not found on PATH (Debian package: bubblewrap/util-linux)"
        )
    return found
