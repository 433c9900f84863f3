"""The agent turns on its own sandbox: the action server outlives it, and it is told what it did.

Each test plays the policy through the sandbox's tools (bash, Python), the only access an agent
has, and checks what a user of the tools would notice: the call comes back with an observation
that says what happened, the next call works, and the action server is the same process (the
host's one connection to it still answers).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP, make_config

from agentroll.runtime import Limits, SandboxClosed, SandboxSpec, procs
from agentroll.runtime.bwrap import BwrapRuntime, BwrapSandbox
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.sandbox import ProcessSandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing"),
]
MiB = 1 << 20
#: The runtimes that can run here (a real Apptainer is not needed for these).
RUNTIMES_HERE = ["bwrap", "fake-apptainer", "local"]


@pytest.fixture
async def sandbox(bwrap: BwrapRuntime) -> AsyncIterator[ProcessSandbox]:
    sb = await bwrap.start(SandboxSpec(), timeout=30)
    yield sb
    await sb.stop()


async def assert_same_server(sb: ProcessSandbox, before: dict[str, object]) -> None:
    """The host's original connection still answers, from the same, older process."""
    after = await sb.tools.alive()
    assert after["pid"] == before["pid"]
    # Not strictly greater: a call can finish within the millisecond the uptime is rounded to;
    # a restarted server would count from zero, below what it said before.
    assert float(after["uptime_s"]) >= float(before["uptime_s"])  # type: ignore[arg-type]


async def test_kill_all_from_bash_kills_only_the_agents_processes(sandbox: ProcessSandbox) -> None:
    before = await sandbox.tools.alive()
    await sandbox.tools.python("x = 1")
    res = await sandbox.tools.bash("sleep 300 & kill -9 -1; echo after-kill", timeout=20)
    assert "after-kill" in res.output  # kill(-1) spares the caller itself
    python = await sandbox.tools.python("print('ran')", timeout=30)
    assert python.kernel_restarted
    assert python.output.startswith("ran\n")  # the new kernel ran the code
    assert "the Python kernel died after the previous call: it was killed by signal 9" in (
        python.output
    )
    assert "state was lost" in python.output
    assert (await sandbox.tools.python("1 + 1")).output == "2\n"
    await assert_same_server(sandbox, before)


async def test_kill_all_from_python_is_reported_by_bash(sandbox: ProcessSandbox) -> None:
    before = await sandbox.tools.alive()
    await sandbox.tools.bash("cd /tmp && export KEPT=1")
    res = await sandbox.tools.python(
        "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('kernel still here')", timeout=30
    )
    assert res.output == "kernel still here\n" and not res.kernel_restarted
    bash = await sandbox.tools.bash("pwd; echo ${KEPT:-unset}", timeout=20)
    assert bash.session_restarted
    assert "bash was killed by signal 9 (SIGKILL" in bash.output
    assert bash.output.startswith("/workspace\nunset\n")  # the new shell ran the command
    await assert_same_server(sandbox, before)


async def test_signals_to_the_server_from_inside_are_ignored(sandbox: ProcessSandbox) -> None:
    before = await sandbox.tools.alive()
    pid = before["pid"]
    res = await sandbox.tools.bash(
        f"for s in KILL TERM INT HUP STOP QUIT USR1; do kill -$s {pid}; done; "
        "pkill -9 -f agentroll; echo signals-sent",
        timeout=20,
    )
    assert "signals-sent" in res.output
    assert (await sandbox.tools.bash("echo fine")).output == "fine\n"
    await assert_same_server(sandbox, before)


@pytest.mark.parametrize("kind", RUNTIMES_HERE)
async def test_termination_signals_never_stop_the_server(kind: str, state_dir: Path) -> None:
    # Where the server is not the namespace's init (Apptainer, local) it still shrugs off
    # the polite signals; only SIGKILL from the host (or from the agent, there) ends it.
    rt = make_config(kind, state_dir).build()
    sb = await rt.start(SandboxSpec(), timeout=60)
    try:
        before = await sb.tools.alive()
        res = await sb.tools.bash(
            f"for s in TERM INT HUP; do kill -$s {before['pid']}; done; echo sent", timeout=20
        )
        assert "sent" in res.output
        await assert_same_server(sb, before)
    finally:
        await rt.close()


async def _socket_attack(sb: ProcessSandbox, socket_path: str) -> None:
    before = await sb.tools.alive()
    code = (
        "import json, socket, struct, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\n"
        "except OSError as e:\n    print('refused:', type(e).__name__)\n"
        "else:\n"
        "    body = json.dumps({'id': 1, 'op': 'shutdown', 'args': {}}).encode()\n"
        "    s.sendall(struct.pack('>I', len(body)) + body)\n"
        "    print('connected:', s.recv(200))\n"
    )
    res = await sb.tools.bash(f"python3 - {socket_path} <<'EOF'\n{code}EOF", timeout=30)
    assert "refused: FileNotFoundError" in res.output
    await sb.tools.bash(f"rm -f {socket_path}; ln -s /dev/null {socket_path}", timeout=10)
    assert (await sb.tools.bash("echo tools-fine")).output == "tools-fine\n"
    await assert_same_server(sb, before)


@pytest.mark.parametrize("kind", RUNTIMES_HERE)
async def test_the_action_socket_serves_only_the_host(kind: str, state_dir: Path) -> None:
    rt = make_config(kind, state_dir).build()
    sb = await rt.start(SandboxSpec(), timeout=60)
    try:
        inside = str(sb.socket_path) if kind == "local" else "/run/agentroll/action.sock"
        await _socket_attack(sb, inside)
    finally:
        await rt.close()


async def test_server_memory_and_environment_are_unreadable(sandbox: ProcessSandbox) -> None:
    before = await sandbox.tools.alive()
    pid = before["pid"]
    res = await sandbox.tools.bash(
        f"cat /proc/{pid}/environ; head -c 16 /proc/{pid}/mem; ls -l /proc/{pid}/cwd; echo done",
        timeout=20,
    )
    assert res.output.count("Permission denied") == 3
    assert "AGENTROLL_SANDBOX_ID" not in res.output
    ptrace = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for request in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE\n"
        f"    rc = libc.ptrace(request, {pid}, 0, 0)\n"
        "    print(rc, os.strerror(ctypes.get_errno()))\n"
    )
    traced = await sandbox.tools.python(ptrace, timeout=30)
    assert traced.output == "-1 Operation not permitted\n" * 2
    await assert_same_server(sandbox, before)


async def test_orphaned_processes_are_reaped(sandbox: ProcessSandbox) -> None:
    # The server is the namespace's init: what the agent orphans becomes its child.
    zombies = "grep -l '^[0-9]* ([^)]*) Z' /proc/[0-9]*/stat 2>/dev/null | wc -l"
    res = await sandbox.tools.bash(
        "for i in $(seq 30); do (true &) ; done; "
        f"for i in $(seq 300); do n=$({zombies}); [ $n = 0 ] && break; sleep 0.1; done; "
        "echo zombies=$n",
        timeout=60,
    )
    assert "zombies=0" in res.output


async def test_fork_bomb_in_bash_spares_other_sandboxes(bwrap: BwrapRuntime) -> None:
    victim = await bwrap.start(SandboxSpec(limits=Limits(max_processes=64)), timeout=30)
    other = await bwrap.start(SandboxSpec(), timeout=30)
    try:
        before = await victim.tools.alive()
        bomb = await victim.tools.bash("bomb() { bomb | bomb & }; bomb; echo lit", timeout=10)
        assert "lit" in bomb.output
        hang = await victim.tools.bash("bomb() { bomb | bomb; }; bomb", timeout=5)
        assert hang.timed_out and "timed out after 5 s" in hang.output
        for _ in range(5):  # meanwhile another rollout's sandbox answers
            res = await asyncio.wait_for(other.tools.bash("true", timeout=60), 120)
            assert res.exit_code == 0
        assert (await victim.tools.bash("echo builtin-works", timeout=20)).exit_code == 0
        await victim.stop_agent(timeout=60)
        assert (await victim.tools.bash("ls / > /dev/null && echo forks-again")).output == (
            "forks-again\n"
        )
        await assert_same_server(victim, before)
    finally:
        await asyncio.gather(victim.stop(), other.stop())


async def test_fork_bomb_in_python_returns_within_its_timeout(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(limits=Limits(max_processes=64)), timeout=30)
    try:
        before = await sb.tools.alive()
        bomb = (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        )
        res = await sb.tools.python(bomb, timeout=10)
        assert res.timed_out and "timed out after 10 s" in res.output
        await sb.stop_agent(timeout=60)
        assert (await sb.tools.python("1 + 1", timeout=60)).output == "2\n"
        await assert_same_server(sb, before)
    finally:
        await sb.stop()


def _needs_memory_cgroup() -> None:
    if os.geteuid() != 0 or "memory" not in SandboxCgroup.controllers():
        pytest.skip("needs root and a writable memory cgroup controller")


async def test_memory_hog_is_killed_and_the_server_lives(bwrap: BwrapRuntime) -> None:
    _needs_memory_cgroup()
    limits = Limits(max_total_memory_bytes=256 * MiB, max_memory_bytes=4096 * MiB)
    sb = await bwrap.start(SandboxSpec(limits=limits), timeout=30)
    try:
        before = await sb.tools.alive()
        await sb.tools.python("kept = 1")
        hog = await sb.tools.python("x = b'1' * (1 << 30)", timeout=60)
        assert hog.kernel_restarted and "killed by signal 9 (SIGKILL" in hog.output
        res = await sb.tools.bash("python3 -c \"x = b'1' * (1 << 30)\"; echo status=$?", timeout=60)
        assert "status=137" in res.output and not res.session_restarted
        await assert_same_server(sb, before)
    finally:
        await sb.stop()


async def test_stop_agent_leaves_only_the_server(sandbox: ProcessSandbox) -> None:
    assert isinstance(sandbox, BwrapSandbox) and sandbox.init is not None
    await sandbox.tools.python(
        "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)"
    )
    await sandbox.tools.bash("sleep 301 & (setsid sleep 302 &); nohup sleep 303 >/dev/null &")
    server = sandbox.init.pid
    assert len(_pidns_members(sandbox)) >= 6
    await sandbox.stop_agent(timeout=30)
    assert _pidns_members(sandbox) == [server]
    assert (await sandbox.tools.bash("echo $((6 * 7))")).output == "42\n"
    assert (await sandbox.tools.python("6 * 7")).output == "42\n"


def _pidns_members(sb: BwrapSandbox) -> list[int]:
    assert sb.pidns is not None
    return sorted(p.pid for p in procs.scan() if p.pidns == sb.pidns.inode)


async def test_exec_after_the_init_died_is_a_clear_error(sandbox: ProcessSandbox) -> None:
    assert isinstance(sandbox, BwrapSandbox) and sandbox.init is not None
    server = sandbox.init.pid
    os.kill(server, signal.SIGKILL)  # the host loses the sandbox, whatever the cause
    for _ in range(200):
        if not procs.is_alive(server, None):
            break
        await asyncio.sleep(0.05)
    with pytest.raises(SandboxClosed, match="init process has exited"):
        await sandbox.exec(["true"], timeout=10)


async def test_sandbox_cgroups_hold_the_agent_and_go_with_the_sandbox(
    bwrap: BwrapRuntime,
) -> None:
    if os.geteuid() != 0 or not SandboxCgroup.controllers():
        pytest.skip("needs root and writable cgroup controllers")
    limits = Limits(max_processes=64, max_total_memory_bytes=512 * MiB)
    sb = await bwrap.start(SandboxSpec(limits=limits), timeout=30)
    assert isinstance(sb, BwrapSandbox) and sb.cgroup is not None and sb.init is not None
    await sb.tools.bash("sleep 300 &")
    agent = set(sb.cgroup.pids())
    assert len(agent) >= 2 and sb.init.pid not in agent  # bash and its job; not the server
    dirs = sb.cgroup.dirs
    if "pids" in dirs:
        assert (dirs["pids"] / "pids.max").read_text().strip() == "64"
    if "memory" in dirs:
        limit_file = next(
            f for f in ("memory.max", "memory.limit_in_bytes") if (dirs["memory"] / f).exists()
        )
        assert (dirs["memory"] / limit_file).read_text().strip() == str(512 * MiB)
    await sb.stop()
    assert dirs and not any(d.exists() for d in dirs.values())


async def test_the_socket_directory_is_read_only_for_the_agent(sandbox: ProcessSandbox) -> None:
    """It lives on the host's disk: nothing the agent runs may write there."""
    res = await sandbox.tools.bash(
        "head -c 1000000 /dev/zero > /run/agentroll/fill; echo status=$?; ls -A /run/agentroll"
    )
    assert "Read-only file system" in res.output and "status=1" in res.output
    assert list(sandbox.socket_dir.iterdir()) == []  # and the host's socket is gone too


async def test_fifos_planted_for_the_server_block_nothing(sandbox: ProcessSandbox) -> None:
    """The server's private files are in the agent's reach (same uid): replaced by FIFOs, an
    `open` would never return. Long commands, the kernel's log and the editor go on."""
    before = await sandbox.tools.alive()
    plant = (  # wherever the server keeps them
        "for d in $(ls -d /tmp/.agentroll-action-* /run/agentroll/.action-* 2>/dev/null); do "
        "for n in kernel.log bash-command; do "
        'rm -f "$d/$n"; mkfifo "$d/$n"; done; done; mkfifo /tmp/pipe; echo planted'
    )
    assert "planted" in (await sandbox.tools.bash(plant)).output
    long_command = "echo " + "x" * 4000 + " > /dev/null; echo long-ran"
    assert "long-ran" in (await sandbox.tools.bash(long_command, timeout=30)).output
    assert "2" in (await sandbox.tools.python("print(1 + 1)", timeout=60)).output
    viewed = await sandbox.tools.editor("view", "/tmp/pipe")
    assert not viewed.ok and "not a regular file" in viewed.output
    await sandbox.upload("after.txt", b"still served")  # no worker thread left stuck
    assert await sandbox.download("after.txt") == b"still served"
    gone = "rm -rf /tmp/.agentroll-action-*; echo " + "y" * 4000 + " > /dev/null; echo ran"
    assert "ran" in (await sandbox.tools.bash(gone, timeout=30)).output
    await assert_same_server(sandbox, before)
