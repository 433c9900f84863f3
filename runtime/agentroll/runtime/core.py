"""``BaseRuntime``: the start/teardown bookkeeping every backend shares.

Starting a sandbox: make its directories, claim a loopback address if it needs one, write its
lease, let the backend boot it under the caller's timeout. Any failure or cancellation on the
way tears down what was started before the error propagates. ``close`` stops every sandbox the
runtime still owns; ``reap_orphans`` tears down sandboxes whose owning server is gone.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path

from agentroll.runtime import lease as leases
from agentroll.runtime import procs
from agentroll.runtime.base import SandboxSpec
from agentroll.runtime.config import CommonConfig
from agentroll.runtime.errors import SandboxClosed, SandboxError, SandboxTimeout
from agentroll.runtime.imageuse import ImageUse, hold_image
from agentroll.runtime.netaddr import LoopbackAllocator
from agentroll.runtime.sandbox import ProcessSandbox
from agentroll.runtime.state import StateDir, new_sandbox_id

log = logging.getLogger(__name__)


class BaseRuntime:
    """Shared by bwrap, singularity and local. Subclasses implement ``_create`` and ``_boot``."""

    name = "base"

    def __init__(self, config: CommonConfig, *, instance_id: str | None = None) -> None:
        self.state = StateDir(config.state_dir)
        self.leases = leases.LeaseStore(self.state)
        self.scanner = procs.ProcScanner()
        self.addresses = LoopbackAllocator(self.state.addresses, config.loopback_range)
        self._nice = config.nice
        self.instance_id = instance_id or secrets.token_hex(4)
        self._owner_pid, self._owner_start = leases.current_owner()
        self._live: dict[str, ProcessSandbox] = {}
        self._image_uses: dict[str, ImageUse] = {}
        self._closed = False

    # ----- backend hooks ------------------------------------------------------------------
    def _needs_address(self, spec: SandboxSpec) -> bool:
        return spec.network

    def _host_workspace(self, spec: SandboxSpec) -> bool:
        return True

    def _create(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        base: Path,
        lease: leases.Lease,
        address: str | None,
    ) -> ProcessSandbox:
        raise NotImplementedError

    async def _boot(self, sandbox: ProcessSandbox, deadline: float) -> None:
        raise NotImplementedError

    def _image(self, spec: SandboxSpec) -> Path | None:
        """The image the sandbox starts from, if any."""
        return spec.image

    async def _reap_extra(self, lease: leases.Lease) -> None:
        """Backend cleanup for an orphan (e.g. stop its Apptainer instance)."""

    # ----- protocol ------------------------------------------------------------------------
    @property
    def live(self) -> list[ProcessSandbox]:
        return list(self._live.values())

    async def start(self, spec: SandboxSpec, *, timeout: float) -> ProcessSandbox:  # noqa: ASYNC109 (contract)
        if self._closed:
            raise SandboxClosed(f"{self.name} runtime is closed")
        sid = new_sandbox_id()
        # Synchronous on purpose (three mkdirs): a cancellation cannot fall between creating
        # the directories and owning them.
        base = self.state.make_sandbox_dirs(sid, workspace=self._host_workspace(spec))
        address = self.addresses.allocate(sid) if self._needs_address(spec) else None
        lease = leases.Lease(
            sandbox_id=sid,
            runtime=self.name,
            owner_instance=self.instance_id,
            owner_pid=self._owner_pid,
            owner_start=self._owner_start,
            address=address,
            label=spec.label,
        )
        self.leases.write(lease)
        sandbox = self._create(sid, spec, base, lease, address)
        sandbox.on_released = self._released
        sandbox.nice = self._nice
        self._live[sid] = sandbox
        loop = asyncio.get_running_loop()
        try:
            self._hold_image(sid, spec)
            async with asyncio.timeout(timeout):
                await self._boot(sandbox, loop.time() + timeout)
        except TimeoutError as exc:
            await sandbox.stop(grace_s=0)
            raise SandboxTimeout(
                f"{self.name} sandbox did not start within {timeout:.1f}s"
            ) from exc
        except BaseException:
            # Includes cancellation: nothing half-started may outlive the request.
            await sandbox.stop(grace_s=0)
            raise
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # A cancellation some awaited helper swallowed (3.11's wait_for can): honour it.
            await sandbox.stop(grace_s=0)
            raise asyncio.CancelledError
        return sandbox

    def _hold_image(self, sid: str, spec: SandboxSpec) -> None:
        """Mark the sandbox's image in use until its teardown is done (see imageuse.py)."""
        image = self._image(spec)
        # Resolved: a symlink to a cached image protects the image it names.
        use = hold_image(Path(image).resolve()) if image is not None else None
        if use is not None:
            self._image_uses[sid] = use

    def record(self, sandbox: ProcessSandbox) -> None:
        """Persist what is now known about a booted sandbox (launcher pid, namespace, ...)."""
        lease = sandbox.lease
        lease.pid = sandbox.pid
        lease.pid_start = procs.start_time(sandbox.pid) if sandbox.pid else None
        lease.pgid = sandbox.pid
        ns = sandbox.pidns
        lease.pidns, lease.pidns_member, lease.pidns_member_start = (
            (ns.inode, ns.member, ns.member_start) if ns else (None, None, None)
        )
        lease.cgroups = [str(p) for p in sandbox.cgroup.paths] if sandbox.cgroup else []
        marker = sandbox.cmdline_marker()
        if marker:
            lease.extra["cmdline_marker"] = marker.decode()
        self.leases.write(lease)

    async def _released(self, sandbox: ProcessSandbox) -> None:
        self._live.pop(sandbox.id, None)
        use = self._image_uses.pop(sandbox.id, None)
        if use is not None:
            use.release()  # after teardown: nothing of the sandbox runs from the image now
        if sandbox.address:
            self.addresses.release(sandbox.address, owner=sandbox.id)
        await asyncio.to_thread(self.state.remove_sandbox_dirs, sandbox.id)
        self.leases.remove(sandbox.id)

    async def reap_orphans(self) -> int:
        return await leases.reap(
            self.state,
            self.scanner,
            runtime=self.name,
            extra_cleanup=self._reap_extra,
            release_address=self.addresses.release,
        )

    async def close(self) -> None:
        """Stop every sandbox this runtime started; later starts are refused."""
        self._closed = True
        results = await asyncio.gather(
            *(sb.stop(grace_s=1.0) for sb in self.live), return_exceptions=True
        )
        for res in results:
            if isinstance(res, SandboxError):
                log.error("teardown on close: %s", res)
            elif isinstance(res, BaseException):
                raise res
