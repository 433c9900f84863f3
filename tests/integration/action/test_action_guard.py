"""The action server outside any namespace: one client, its guards, and stopping the agent.

These servers run as plain processes (as for the ``local`` runtime), so they are not a PID
namespace's init; what they show holds for every runtime.
"""

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from action_servers import ServerProcess, pid_alive, start_server

from agentroll.runtime.action import ActionClient

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def single_client_server() -> AsyncIterator[tuple[ServerProcess, ActionClient]]:
    with tempfile.TemporaryDirectory(prefix="act-") as base:
        server = start_server(Path(base), "--single-client")
        client = ActionClient(server.socket)
        try:
            await client.connect(20)
            yield server, client
        finally:
            await client.close()
            await asyncio.to_thread(server.proc.wait, 30)  # ends with its client


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        stat = _stat(int(name)) if name.isdigit() else None
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return sorted(found)


async def test_only_the_first_connection_is_served() -> None:
    async with single_client_server() as (server, client):
        assert not server.socket.exists()  # unlinked once the host was connected
        with socket.socket(socket.AF_UNIX) as probe, pytest.raises(FileNotFoundError):
            probe.connect(str(server.socket))
        assert (await client.alive())["ok"] is True
    assert server.proc.returncode == 0  # its only client left: nobody could reach it


async def test_termination_signals_do_not_stop_a_sandbox_server() -> None:
    async with single_client_server() as (server, client):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            server.proc.send_signal(sig)
        assert (await client.bash("echo still-serving")).output == "still-serving\n"


async def test_tools_are_confined_and_the_server_is_not() -> None:
    with tempfile.TemporaryDirectory(prefix="act-") as base:
        server = start_server(Path(base), "--single-client", "--rlimit", "nofile=100")
        client = ActionClient(server.socket)
        try:
            await client.connect(20)
            res = await client.bash("cat /proc/$$/oom_score_adj; ulimit -n")
            assert res.output.split() == ["1000", "100"]
            mine = await asyncio.to_thread(Path(f"/proc/{server.proc.pid}/oom_score_adj").read_text)
            assert mine.strip() != "1000"
        finally:
            await client.close()
            await asyncio.to_thread(server.proc.wait, 30)


async def test_stop_agent_kills_everything_below_the_server() -> None:
    async with single_client_server() as (server, client):
        await client.python(
            "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)"
        )
        await client.bash("sleep 301 & (setsid sleep 302 &); nohup sleep 303 >/dev/null 2>&1 &")
        assert len(descendants(server.proc.pid)) >= 6  # bash, kernel and four sleeps
        await client.stop_agent(timeout=30)
        assert descendants(server.proc.pid) == []
        assert (await client.bash("echo fresh")).output == "fresh\n"
        assert descendants(server.proc.pid) != []


async def test_orphans_are_reaped_by_the_server() -> None:
    async with single_client_server() as (server, client):
        await client.bash("for i in $(seq 20); do (sleep 0.01 &); done; sleep 0.5")
        zombies: list[int] = []
        for _ in range(100):
            zombies = [
                int(name)
                for name in os.listdir("/proc")
                if name.isdigit() and _stat(int(name)) == ("Z", server.proc.pid)
            ]
            if not zombies:
                break
            await asyncio.sleep(0.1)
        assert zombies == []


async def test_outside_a_pid_namespace_of_its_own_the_server_gives_no_orphan_count() -> None:
    """Orphans of a server that is not init may be re-parented elsewhere: no count, not 0."""
    async with single_client_server() as (_, client):
        await client.bash("(sleep 0.01 &); sleep 0.2")
        assert await client.orphans_reaped() is None


async def test_bash_killed_between_calls_is_reported(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        bash_pid = int((await client.bash("cd / && echo $$")).output)
        os.kill(bash_pid, signal.SIGKILL)
        for _ in range(100):
            if not pid_alive(bash_pid):
                break
            await asyncio.sleep(0.05)
        res = await client.bash("pwd")
        assert res.session_restarted and res.exit_code == 0
        assert res.output.startswith(f"{server.workdir}\n")  # the new shell ran the command
        assert "[bash was killed by signal 9 (SIGKILL" in res.output
        assert "after the previous command" in res.output
    finally:
        await client.close()


async def test_a_long_command_that_cannot_be_staged_still_reports_the_restart(
    server: ServerProcess,
) -> None:
    """The agent killed bash, then put a file where long commands are staged."""
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        bash_pid = int((await client.bash("echo $$")).output)
        (state_dir,) = server.socket.parent.glob(".agentroll-action-*")
        os.kill(bash_pid, signal.SIGKILL)
        shutil.rmtree(state_dir)
        state_dir.write_text("planted")
        res = await client.bash(f"echo {'x' * 10_000}")
        assert res.session_restarted and res.exit_code is None
        assert "[bash was killed by signal 9 (SIGKILL" in res.output
        assert "[the command could not be staged" in res.output
        assert (await client.bash("echo short")).output == "short\n"
    finally:
        await client.close()


async def test_a_command_sent_to_a_dying_bash_runs_once_in_a_new_one(
    server: ServerProcess,
) -> None:
    """`kill -9 -1` from the Python tool: bash may still look alive when the next call comes
    (SIGKILL is delivered when it next runs, late on a busy node). Stopped, then killed once the
    call is under way, bash dies before it reads the command: a new bash runs it, once."""
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        bash_pid = int((await client.bash("echo $$")).output)
        os.kill(bash_pid, signal.SIGSTOP)
        call = asyncio.create_task(client.bash("echo ran >> runs.txt; echo next-call", timeout=20))
        await asyncio.sleep(0.5)  # the call has reached the stopped bash (or is about to)
        os.kill(bash_pid, signal.SIGKILL)
        res = await asyncio.wait_for(call, 30)
        assert "next-call" in res.output, res.output
        assert res.session_restarted and res.exit_code == 0
        assert "[bash was killed by signal 9 (SIGKILL" in res.output
        assert (await client.bash("cat runs.txt")).output == "ran\n"  # once, not twice
    finally:
        await client.close()


async def test_a_command_that_kills_its_own_bash_is_not_run_again(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        res = await client.bash("echo ran >> runs.txt; kill -9 $$", timeout=20)
        assert res.session_restarted and "[bash was killed by signal 9 (SIGKILL" in res.output
        assert (await client.bash("cat runs.txt")).output == "ran\n"
    finally:
        await client.close()
