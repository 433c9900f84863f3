"""The kernel gives a PID namespace's number to the next namespace made as soon as the old one
is gone (often within milliseconds on a busy node). A sandbox's namespace number therefore names
it only while a process known to be in it lives; otherwise matching by that number takes down
whatever now has it: another server's sandbox, or anyone's container.

Found in a soak: a second server on the node, restarting, reaped its dead predecessor's leases
by their recorded namespace numbers. One of those numbers had just gone to a new sandbox of the
soak's server, whose action server was killed during INIT: an `infra_error` the soak's own
rollouts had done nothing to earn.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP

from agentroll.runtime import procs
from agentroll.runtime.lease import Lease, LeaseStore, reap
from agentroll.runtime.state import StateDir

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")]


class OwnNamespace:
    """`sleep` as pid 1 of a new PID namespace, started like a sandbox (bwrap)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        argv = ["bwrap", "--unshare-user", "--unshare-pid", "--as-pid-1", "--die-with-parent",
                "--ro-bind", "/", "/", "--info-fd", str(write_fd), "sleep", "300"]  # fmt: skip
        self.launcher = subprocess.Popen(
            argv, pass_fds=(write_fd,), start_new_session=True, env={"PATH": "/usr/bin:/bin"}
        )
        os.close(write_fd)
        try:
            info = _read_json(read_fd)
        finally:
            os.close(read_fd)
        self.pid: int = info["child-pid"]
        self.inode: int = info["pid-namespace"]

    def alive(self) -> bool:
        return procs.is_alive(self.pid, None) and procs.pidns_of(self.pid) == self.inode

    def close(self) -> None:
        self.launcher.kill()
        self.launcher.wait(10)


def _read_json(fd: int) -> dict[str, int]:
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        assert chunk, f"bwrap ended before writing its info: {data!r}"
        data += chunk
        try:
            return json.loads(data)  # type: ignore[no-any-return]
        except ValueError:
            continue  # written in more than one piece


@pytest.fixture
def neighbour() -> Iterator[OwnNamespace]:
    ns = OwnNamespace()
    yield ns
    ns.close()


def _dead_process() -> tuple[int, int]:
    """(pid, start time) of a process that has exited: a dead owner, or a dead sandbox's init."""
    proc = subprocess.Popen(["sleep", "0.01"])
    started = procs.start_time(proc.pid)
    proc.wait()
    assert started is not None
    return proc.pid, started


def _orphan_lease(state: StateDir, sandbox_id: str, pidns: int, member: tuple[int, int]) -> None:
    owner, owner_start = _dead_process()
    state.make_sandbox_dirs(sandbox_id, workspace=True)
    lease = Lease(
        sandbox_id=sandbox_id,
        runtime="bwrap",
        owner_instance="gone",
        owner_pid=owner,
        owner_start=owner_start,
        pidns=pidns,
        pidns_member=member[0],
        pidns_member_start=member[1],
    )
    LeaseStore(state).write(lease)


async def test_a_restarted_server_never_kills_a_neighbour_holding_a_dead_sandboxs_pidns_number(
    tmp_path: Path, neighbour: OwnNamespace
) -> None:
    state = StateDir(tmp_path)
    # The dead server's sandbox: its init is gone, and its namespace number is now the
    # neighbour's, as the kernel hands it out.
    _orphan_lease(state, "dead1", neighbour.inode, _dead_process())
    assert await reap(state, procs.ProcScanner(), runtime="bwrap") == 1
    await asyncio.sleep(0.2)
    assert neighbour.alive(), "a process that merely got a dead sandbox's namespace number died"
    assert LeaseStore(state).all() == [] and not state.sandbox_dir("dead1").exists()


async def test_a_restarted_server_still_reaps_an_orphan_by_its_living_namespace(
    tmp_path: Path,
) -> None:
    """The orphan's launcher ignored its dead parent: its init still vouches for the namespace,
    so everything in it goes, even without the sandbox's environment marker."""
    orphan = OwnNamespace()
    try:
        state = StateDir(tmp_path)
        member = procs.start_time(orphan.pid)
        assert member is not None
        _orphan_lease(state, "orphan1", orphan.inode, (orphan.pid, member))
        assert await reap(state, procs.ProcScanner(), runtime="bwrap") == 1
        deadline = time.monotonic() + 10
        while orphan.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not orphan.alive()
    finally:
        orphan.close()


async def test_a_namespace_number_counts_only_while_its_member_outlives_the_scan(
    neighbour: OwnNamespace,
) -> None:
    scanner = procs.ProcScanner()
    dead_init = _dead_process()
    reused = procs.PidNamespace(neighbour.inode, *dead_init)
    assert await scanner.find("no-such-sandbox", pidns=reused) == []
    vouched = procs.PidNamespace.of(neighbour.pid, neighbour.inode)
    assert vouched is not None
    assert await scanner.find("no-such-sandbox", pidns=vouched) == [neighbour.pid]
    assert procs.PidNamespace.of(dead_init[0], neighbour.inode) is None
