"""The contract every runtime satisfies, run against each backend available here."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from rt_support import ISOLATED, make_config, marked_pids
from tests.support.sandbox_procs import owned_sandbox_processes

from agentroll.runtime import SandboxClosed, SandboxSpec, procs
from agentroll.runtime.core import BaseRuntime

pytestmark = pytest.mark.integration


async def test_tools_exec_and_files_work(runtime: BaseRuntime, kind: str) -> None:
    sb = await runtime.start(SandboxSpec(env={"GREETING": "hello"}), timeout=30)
    res = await sb.tools.bash("echo $GREETING > note.txt; cat note.txt; (exit 3)", timeout=10)
    assert res.output.strip() == "hello"
    assert res.exit_code == 3
    assert await sb.download("note.txt") == b"hello\n"
    await sb.upload("data.bin", b"\x00\x01payload")
    out = await sb.exec(["sh", "-c", "wc -c < data.bin; echo err >&2; exit 4"], timeout=10)
    assert (out.exit_code, out.stdout.strip(), out.stderr.strip()) == (4, "9", "err")
    assert sb.workdir is not None and (sb.workdir / "data.bin").read_bytes() == b"\x00\x01payload"
    if kind in ISOLATED:
        pwd = await sb.exec(["pwd"], timeout=10)
        assert pwd.stdout.strip() == "/workspace"
    await sb.stop()


async def test_sandbox_processes_yield_the_cpu_to_the_server(runtime: BaseRuntime) -> None:
    """Every sandbox process runs at the configured niceness (10 by default): the action
    server, the agent's commands and execs alike."""
    sb = await runtime.start(SandboxSpec(), timeout=30)
    # Ten above the server's own, where that fits (19 is the lowest priority there is: a
    # server started under `nice -n 10` has sandboxes at 19).
    expected = min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)
    tool = await sb.tools.bash("cut -d' ' -f19 /proc/self/stat; cut -d' ' -f19 /proc/$PPID/stat")
    execd = await sb.exec(["sh", "-c", "cut -d' ' -f19 /proc/self/stat"], timeout=10)
    assert sb.pid is not None and sb.nice == 10
    launcher = os.getpriority(os.PRIO_PROCESS, sb.pid)
    assert [int(x) for x in tool.output.split()] == [expected, expected]
    assert int(execd.stdout) == launcher == expected
    await sb.stop()


async def test_exec_feeds_stdin_and_times_out(runtime: BaseRuntime) -> None:
    sb = await runtime.start(SandboxSpec(), timeout=30)
    echoed = await sb.exec(["cat"], timeout=10, input=b"through stdin")
    assert echoed.stdout == "through stdin" and echoed.exit_code == 0
    slow = await sb.exec(["sleep", "30"], timeout=0.5)
    assert slow.timed_out and slow.exit_code is None
    again = await sb.exec(["echo", "still fine"], timeout=10)
    assert again.stdout.strip() == "still fine"
    await sb.stop()


async def test_server_environment_never_leaks(runtime: BaseRuntime, kind: str) -> None:
    os.environ["AGENTROLL_TEST_SECRET_TOKEN"] = "s3cr3t"
    try:
        sb = await runtime.start(SandboxSpec(env={"VISIBLE": "yes"}), timeout=30)
    finally:
        del os.environ["AGENTROLL_TEST_SECRET_TOKEN"]
    res = await sb.tools.bash("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", timeout=10)
    assert "VISIBLE=yes" in res.output
    assert "s3cr3t" not in res.output
    out = await sb.exec(["env"], timeout=10)
    assert "s3cr3t" not in out.stdout and f"AGENTROLL_SANDBOX_ID={sb.id}" in out.stdout
    await sb.stop()


async def test_stop_is_idempotent_and_leaves_nothing(runtime: BaseRuntime) -> None:
    sb = await runtime.start(SandboxSpec(), timeout=30)
    await sb.tools.bash("sleep 300 & (setsid sleep 301 &) ; echo started", timeout=10)
    assert len(marked_pids(sb.id)) >= 3
    lease = runtime.leases.path(sb.id)
    assert lease.exists() and sb.socket_dir.exists()
    await asyncio.gather(sb.stop(), sb.stop())
    await sb.stop()
    assert marked_pids(sb.id) == []
    assert not lease.exists() and not sb.socket_dir.exists()
    with pytest.raises(SandboxClosed):
        await sb.exec(["true"], timeout=5)


async def test_cancelled_start_leaves_nothing(runtime: BaseRuntime) -> None:
    cancelled = 0
    for delay in (0.0, 0.01, 0.03, 0.06, 0.1):
        task = asyncio.create_task(runtime.start(SandboxSpec(), timeout=30))
        await asyncio.sleep(delay)
        task.cancel()
        try:
            sb = await task
        except asyncio.CancelledError:
            cancelled += 1
        else:  # finished before the cancel landed
            await sb.stop()
    assert cancelled >= 2
    assert runtime.live == []
    assert list(runtime.leases.dir.iterdir()) == []
    assert list(runtime.state.sandboxes.iterdir()) == []
    assert owned_sandbox_processes(runtime.instance_id) == {}


async def test_close_stops_every_sandbox(runtime: BaseRuntime) -> None:
    sandboxes = await asyncio.gather(*(runtime.start(SandboxSpec(), timeout=30) for _ in range(3)))
    await runtime.close()
    for sb in sandboxes:
        assert marked_pids(sb.id) == []
    with pytest.raises(SandboxClosed):
        await runtime.start(SandboxSpec(), timeout=5)


async def test_network_is_off_unless_asked(runtime: BaseRuntime, kind: str) -> None:
    if kind not in ISOLATED:
        pytest.skip("the local runtime has no isolation")
    probe = "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
    sb = await runtime.start(SandboxSpec(), timeout=30)
    out = await sb.exec(["python3", "-c", probe], timeout=10)
    assert out.stdout.strip() == "['lo']"
    assert sb.address is None or kind != "bwrap"
    await sb.stop()


async def test_reap_orphans_after_owner_dies(kind: str, state_dir: Path) -> None:
    """A server killed with SIGKILL leaves sandboxes; the next one reaps exactly those."""
    tests, state = str(Path(__file__).parent), str(state_dir)
    script = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {tests!r})\n"
        "from rt_support import make_config\n"
        "from pathlib import Path\n"
        "from agentroll.runtime import SandboxSpec\n"
        "async def main():\n"
        f"    rt = make_config({kind!r}, Path({state!r})).build()\n"
        "    sb = await rt.start(SandboxSpec(), timeout=30)\n"
        "    print(sb.id, flush=True)\n"
        "    await asyncio.sleep(300)\n"
        "asyncio.run(main())\n"
    )
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert owner.stdout is not None
    line = await asyncio.wait_for(owner.stdout.readline(), 60)
    sandbox_id = line.decode().strip()
    owner.kill()
    await owner.wait()
    await asyncio.sleep(0.2)
    rt = make_config(kind, state_dir).build()
    # bwrap dies with its parent; the Apptainer instance and its helpers do not.
    assert await rt.reap_orphans() == 1
    assert marked_pids(sandbox_id) == []
    assert not rt.leases.path(sandbox_id).exists()
    assert not rt.state.sandbox_dir(sandbox_id).exists()
    assert await rt.reap_orphans() == 0
    await rt.close()


async def test_reap_never_touches_a_live_owner(
    runtime: BaseRuntime, state_dir: Path, kind: str
) -> None:
    sb = await runtime.start(SandboxSpec(), timeout=30)
    other = make_config(kind, state_dir).build()
    assert await other.reap_orphans() == 0
    res = await sb.tools.bash("echo alive", timeout=10)
    assert res.output.strip() == "alive"
    await other.close()
    await sb.stop()


def _sleepers(sandbox_id: str) -> list[int]:
    """The test's own marked ``sleep 98765x`` processes of one sandbox."""
    return [
        p.pid
        for p in procs.scan()
        if p.sandbox_id == sandbox_id and p.cmdline.startswith(b"sleep\x0098765")
    ]


async def test_stop_agent_kills_every_agent_process(runtime: BaseRuntime) -> None:
    sb = await runtime.start(SandboxSpec(), timeout=30)
    await sb.tools.python(
        "import subprocess\nsubprocess.Popen(['sleep', '987651'], start_new_session=True)"
    )
    await sb.tools.bash(
        "sleep 987652 & (setsid sleep 987653 &); nohup sleep 987654 >/dev/null 2>&1 &"
    )
    for _ in range(200):  # a background job may not have exec'd sleep yet
        if len(_sleepers(sb.id)) == 4:
            break
        await asyncio.sleep(0.05)
    assert len(_sleepers(sb.id)) == 4
    await sb.stop_agent(timeout=30)
    assert _sleepers(sb.id) == []
    assert (await sb.tools.bash("echo $((6 * 7))")).output == "42\n"
    assert (await sb.tools.python("6 * 7")).output == "42\n"
    await sb.stop()
