"""Lease files: every sandbox is owned, and a restarted server reaps what its dead owner left.

A lease records the owning server (instance id, pid and its start time, so a reused pid is
not mistaken for the owner) and the sandbox's own launcher (pid, start time, process group,
PID namespace, cgroup). ``reap`` kills only processes that carry the dead sandbox's markers
(see procs.py) and removes its directories; leases of live owners are never touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from agentroll.runtime import procs
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.state import StateDir

log = logging.getLogger(__name__)


@dataclass
class Lease:
    sandbox_id: str
    runtime: str
    owner_instance: str
    owner_pid: int
    owner_start: int | None
    pid: int | None = None
    pid_start: int | None = None
    pgid: int | None = None
    pidns: int | None = None
    #: A process of that namespace (pid, start time): the number counts only while it lives.
    pidns_member: int | None = None
    pidns_member_start: int | None = None
    #: The sandbox's cgroup directories (one per hierarchy).
    cgroups: list[str] = field(default_factory=list)
    address: str | None = None
    label: str = ""
    #: Runtime-specific identity (e.g. the Apptainer instance name), also a cmdline marker.
    extra: dict[str, str] = field(default_factory=dict)

    def owner_alive(self) -> bool:
        return procs.is_alive(self.owner_pid, self.owner_start)

    def namespace(self) -> procs.PidNamespace | None:
        """None for a lease without the member (written by an older server): never counted."""
        if self.pidns is None or self.pidns_member is None or self.pidns_member_start is None:
            return None
        return procs.PidNamespace(self.pidns, self.pidns_member, self.pidns_member_start)


def current_owner() -> tuple[int, int | None]:
    pid = os.getpid()
    return pid, procs.start_time(pid)


class LeaseStore:
    def __init__(self, state: StateDir) -> None:
        self.dir = state.leases

    def path(self, sandbox_id: str) -> Path:
        return self.dir / f"{sandbox_id}.json"

    def write(self, lease: Lease) -> None:
        """Atomically (re)write a lease: a crash never leaves a half-written file."""
        tmp = self.dir / f".{lease.sandbox_id}.tmp"
        tmp.write_text(json.dumps(asdict(lease)))
        os.replace(tmp, self.path(lease.sandbox_id))

    def remove(self, sandbox_id: str) -> None:
        self.path(sandbox_id).unlink(missing_ok=True)

    def all(self) -> list[Lease]:
        out = []
        known = {f.name for f in fields(Lease)}
        for p in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(p.read_text())
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                if "cgroup" in data:  # written by a server that had one pids cgroup
                    old = data.pop("cgroup")
                    data["cgroups"] = [old] if old else []
                # A newer server's fields are dropped, not fatal: its orphans are still
                # reaped by the markers this version knows.
                out.append(Lease(**{k: v for k, v in data.items() if k in known}))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("ignoring unreadable lease %s: %s", p, exc)
        return out


ExtraCleanup = Callable[[Lease], Awaitable[None]]


async def reap(
    state: StateDir,
    scanner: procs.ProcScanner,
    *,
    runtime: str,
    extra_cleanup: ExtraCleanup | None = None,
    release_address: Callable[[str], None] | None = None,
) -> int:
    """Tear down every sandbox of ``runtime`` whose owning server is gone; return how many."""
    store = LeaseStore(state)
    dead = [
        lease
        for lease in await asyncio.to_thread(store.all)
        if lease.runtime == runtime and not lease.owner_alive()
    ]
    for lease in dead:
        marker = lease.extra.get("cmdline_marker")
        cgroup = SandboxCgroup([Path(p) for p in lease.cgroups])
        if extra_cleanup is not None:
            await extra_cleanup(lease)
        for _ in range(5):
            pids = await scanner.find(
                lease.sandbox_id,
                pidns=lease.namespace(),
                cmdline_marker=marker.encode() if marker else None,
            )
            pids = sorted(set(pids) | set(cgroup.pids()))
            if not pids:
                break
            procs.kill(pids)
            await asyncio.sleep(0.05)
        cgroup.remove()
        if lease.address and release_address is not None:
            release_address(lease.address)
        state.remove_sandbox_dirs(lease.sandbox_id)
        store.remove(lease.sandbox_id)
        log.warning(
            "reaped orphaned sandbox %s (owner pid %s gone)", lease.sandbox_id, lease.owner_pid
        )
    return len(dead)
