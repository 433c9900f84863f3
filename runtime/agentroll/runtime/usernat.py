"""Starting a networked bubblewrap sandbox: its own namespaces, then slirp4netns, then bwrap.

The order is what makes it safe (runtime/netns.py says what the sandbox can reach):

1. the launcher makes a user and network namespace and reports it (a pipe it closes);
2. we check its network namespace is not ours, and attach slirp4netns to it by the launcher's
   pid (our unreaped child, so the pid cannot name anyone else), waiting for ``--ready-fd``;
3. we tell the launcher to go: it installs the routes and execs bubblewrap in place.

The slirp4netns process is the sandbox's: our child in its own session, carrying the sandbox's
marker (so teardown's scan and the orphan reaper find it), stopped with the sandbox, and gone
by itself if this server dies, when the kernel closes our end of its ``--exit-fd``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime import netns, procs
from agentroll.runtime.config import SandboxNetworkConfig
from agentroll.runtime.errors import RuntimeUnavailable, SandboxStartError
from agentroll.runtime.sandbox import ProcessSandbox, open_log, read_until_eof, spawn


class UserModeNat:
    """One sandbox's slirp4netns process; ``stop`` it with the sandbox."""

    def __init__(self, proc: asyncio.subprocess.Process, exit_fd: int) -> None:
        self.proc = proc
        self._exit_fd = exit_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self) -> None:
        """Close its exit pipe (it leaves by itself), then kill and reap it whatever it does."""
        if self._exit_fd >= 0:
            os.close(self._exit_fd)
            self._exit_fd = -1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 1.0)
        if self.proc.returncode is None:
            procs.kill_led_group(self.proc)
            await asyncio.wait_for(self.proc.wait(), 10)


def tools(config: SandboxNetworkConfig) -> str:
    """The slirp4netns executable; refuses clearly if a tool that networking needs is missing."""
    needed = ["unshare", "bash", "ip", *(["iptables-restore"] if config.allowed_host_ports else [])]
    missing = [name for name in needed if shutil.which(name) is None]
    slirp = shutil.which(config.slirp4netns_path or "slirp4netns")
    if slirp is None:
        missing.append(config.slirp4netns_path or "slirp4netns")
    if missing or slirp is None:
        raise RuntimeUnavailable(
            f"a sandbox with network needs {', '.join(missing)} (Debian packages slirp4netns, "
            "iproute2, util-linux, iptables; scripts/install-system-deps.sh installs them)"
        )
    return slirp


@dataclass(frozen=True)
class NetworkFiles:
    """What ``write_files`` made for one sandbox, under its directory."""

    routes: Path  # ``ip -batch`` input run by the launcher
    firewall: Path | None  # ``iptables-restore`` input, with allowed host ports only
    resolv_conf: Path | None  # bound over /etc/resolv.conf (None: the image has no such file)


def write_files(base: Path, config: SandboxNetworkConfig, *, dns: bool) -> NetworkFiles:
    """The launcher's route batch and firewall, and (with ``dns``) the sandbox's resolv.conf."""
    blocked = [*netns.read_node_networks(), *config.blocked_networks]
    routes = base / "net-routes"
    routes.write_text(netns.route_batch(blocked))
    firewall = None
    if config.allowed_host_ports:
        firewall = base / "net-firewall"
        firewall.write_text(netns.firewall_rules(config.allowed_host_ports))
    resolv = None
    if dns:
        resolv = base / "resolv.conf"
        resolv.write_text(netns.resolv_conf())
    return NetworkFiles(routes, firewall, resolv)


async def launch_networked(
    sb: ProcessSandbox,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    pass_fds: Sequence[int],
    files: NetworkFiles,
    slirp4netns: str,
    deadline: float,
) -> UserModeNat:
    """Launch ``command`` (bwrap) as ``sb``'s launcher inside a NAT-ed namespace of its own.

    With a firewall in ``files``, slirp4netns maps the gateway to the node's loopback and the
    firewall lets only the allowed ports by.
    """
    firewall = files.firewall
    unshared_r, unshared_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        gate = netns.gate_argv(
            unshared_fd=unshared_w, go_fd=go_r, routes=str(files.routes),
            firewall=str(firewall) if firewall else None, command=command,
        )  # fmt: skip
        await sb.launch(gate, env, pass_fds=[*pass_fds, unshared_w, go_r])
    except BaseException:
        for fd in (unshared_r, go_w):
            os.close(fd)
        raise
    finally:
        for fd in (unshared_w, go_r):
            os.close(fd)
    try:
        await read_until_eof(unshared_r, deadline)
        nat = await _attach(sb, env, slirp4netns, host_loopback=bool(firewall), deadline=deadline)
        try:
            os.write(go_w, b"go\n")
        except BrokenPipeError as exc:
            await nat.stop()
            raise SandboxStartError(
                f"sandbox {sb.id}: its launcher died before its network was up: {sb.log_tail()}"
            ) from exc
    finally:
        os.close(go_w)
    return nat


async def _attach(
    sb: ProcessSandbox,
    env: Mapping[str, str],
    slirp4netns: str,
    *,
    host_loopback: bool,
    deadline: float,
) -> UserModeNat:
    pid = sb.pid
    assert pid is not None
    try:
        theirs = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        theirs = None
    if theirs is None or theirs == os.readlink("/proc/self/ns/net"):
        # Never attach to the server's own namespace: the launcher failed to make one.
        raise SandboxStartError(
            f"sandbox {sb.id}: no network namespace of its own: {sb.log_tail() or '(no output)'}"
        )
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()  # ours stays close-on-exec: only slirp4netns holds the other end
    argv = netns.slirp4netns_argv(
        slirp4netns, pid=pid, ready_fd=ready_w, exit_fd=exit_r, host_loopback=host_loopback
    )
    try:
        with open_log(sb.base_dir / "log") as logf:
            proc = await spawn(
                *sb._niced(argv), stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=logf,
                env=dict(env), start_new_session=True, pass_fds=(ready_w, exit_r),
            )  # fmt: skip
    except BaseException as exc:  # a cancellation too: spawn has reaped the child already
        os.close(exit_w)
        os.close(ready_r)
        if isinstance(exc, OSError):
            raise SandboxStartError(f"cannot run {slirp4netns}: {exc}") from exc
        raise
    finally:
        os.close(ready_w)
        os.close(exit_r)
    nat = UserModeNat(proc, exit_w)
    try:
        ready = await read_until_eof(ready_r, deadline)
    except BaseException:
        await asyncio.shield(nat.stop())
        raise
    if ready != b"1":
        await nat.stop()
        raise SandboxStartError(
            f"sandbox {sb.id}: slirp4netns did not configure its network: {sb.log_tail()}"
        )
    return nat
