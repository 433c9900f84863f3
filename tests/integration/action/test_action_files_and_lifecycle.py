"""Files, transfers, concurrency, protocol errors and the server's life and death, end to end."""

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from action_servers import ServerProcess, pid_alive, start_server

from agentroll.runtime.action import ActionClient, ActionRequestError, ActionServerUnavailable
from agentroll.runtime.action.protocol import HEADER, MAX_FRAME_BYTES, decode_body, frame_length

pytestmark = pytest.mark.integration


async def test_editor_round_trip(client: ActionClient, shared_server: ServerProcess) -> None:
    path = str(shared_server.workdir / "editor" / "m.py")
    created = await client.editor("create", path, file_text="def f():\n    return 1\n")
    assert created.ok
    edited = await client.editor("str_replace", path, old_str="return 1", new_str="return 2")
    assert edited.ok and "     2\t    return 2" in edited.output
    duplicate = await client.editor("insert", path, insert_line=2, new_str="    return 2")
    assert duplicate.ok
    refused = await client.editor("str_replace", path, old_str="return 2", new_str="return 3")
    assert not refused.ok and "occurs 2 times" in refused.output
    assert (await client.editor("undo_edit", path)).ok
    view = await client.editor("view", path, view_range=[2, 2])
    assert view.ok and view.output.endswith("     2\t    return 2\n")
    outside = await client.editor("view", "../../../../etc/passwd")
    assert not outside.ok and "Access denied" in outside.output and "root:" not in outside.output


async def test_upload_download_and_refusals(
    client: ActionClient, shared_server: ServerProcess
) -> None:
    payload = os.urandom(300_000)
    await client.upload("transfer/blob.bin", payload)
    assert (shared_server.workdir / "transfer/blob.bin").read_bytes() == payload
    assert await client.download("transfer/blob.bin") == payload
    with pytest.raises(ActionRequestError, match="outside the allowed"):
        await client.download("/etc/hostname")
    with pytest.raises(ActionRequestError, match="outside the allowed"):
        await client.upload("../escaped.bin", b"x")
    assert not (shared_server.workdir.parent / "escaped.bin").exists()


async def test_different_tools_run_concurrently_on_one_connection(
    client: ActionClient, shared_server: ServerProcess
) -> None:
    # A handshake through files: each call waits for the other, so both can only succeed if
    # bash and Python really run at the same time (run one after the other, both time out).
    sync = shared_server.workdir / "handshake"
    sync.mkdir(exist_ok=True)
    bash, python, view = await asyncio.gather(
        client.bash(
            f"cd {sync}; until [ -e py_ready ]; do sleep 0.05; done; touch bash_saw; echo bash-ok",
            timeout=20,
        ),
        client.python(
            f"import os, time\nos.chdir({str(sync)!r})\nopen('py_ready', 'w').close()\n"
            "while not os.path.exists('bash_saw'): time.sleep(0.05)\n'py-ok'",
            timeout=20,
        ),
        client.editor("view", str(sync)),
    )
    assert (bash.output, bash.timed_out) == ("bash-ok\n", False)
    assert (python.output, python.timed_out) == ("'py-ok'\n", False)
    assert view.ok


async def test_unknown_op_and_bad_arguments_are_request_errors(client: ActionClient) -> None:
    with pytest.raises(ActionRequestError, match="unknown op 'format_disk'"):
        await client._call("format_disk", {}, 10)
    with pytest.raises(ActionRequestError, match="argument 'command' must be str"):
        await client._call("bash", {"command": 5}, 10)
    with pytest.raises(ActionRequestError, match="max_output_chars must be between"):
        await client.bash("true", max_output_chars=0)
    assert (await client.alive())["ok"] is True  # the connection survives refusals


def test_oversized_frame_gets_an_error_and_the_connection_closes(
    shared_server: ServerProcess,
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(10)
        raw.connect(str(shared_server.socket))
        raw.sendall(HEADER.pack(MAX_FRAME_BYTES + 1))
        length = frame_length(raw.recv(4, socket.MSG_WAITALL))
        reply = decode_body(raw.recv(length, socket.MSG_WAITALL))
        assert reply["error"]["type"] == "frame_too_large"
        assert raw.recv(1) == b""  # closed by the server


def test_socket_is_private(shared_server: ServerProcess) -> None:
    mode = shared_server.socket.stat().st_mode
    assert stat.S_ISSOCK(mode) and mode & 0o777 == 0o600


async def test_server_crash_fails_calls_promptly(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    bash_pid = int((await client.bash("echo $$")).output)
    running = asyncio.create_task(client.bash("sleep 60", timeout=120))
    await asyncio.sleep(0.3)
    os.kill(server.proc.pid, signal.SIGKILL)
    # Without the lost-connection handling this call would wait 120 s + margin.
    with pytest.raises(ActionServerUnavailable):
        await asyncio.wait_for(running, 10)
    with pytest.raises(ActionServerUnavailable):
        await client.bash("echo again")
    await client.close()
    server.proc.wait(5)
    # The pty hangs up when its master dies with the server: bash does not outlive it.
    for _ in range(100):
        if not pid_alive(bash_pid):
            break
        await asyncio.sleep(0.05)
    assert not pid_alive(bash_pid)
    with pytest.raises(ActionServerUnavailable, match=r"did not answer within 0\.5 s"):
        await ActionClient(server.socket).connect(0.5)


async def test_shutdown_kills_children_and_removes_socket(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    bash_pid = int((await client.bash("echo $$")).output)
    kernel_pid = int((await client.python("import os\nos.getpid()")).output)
    await client.shutdown()
    await client.close()
    assert await asyncio.to_thread(server.proc.wait, 20) == 0
    assert not server.socket.exists()
    assert list(server.socket.parent.iterdir()) == []  # private state dir removed too
    assert not pid_alive(bash_pid) and not pid_alive(kernel_pid)


async def test_sigterm_stops_the_server_cleanly(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    kernel_pid = int((await client.python("import os\nos.getpid()")).output)
    server.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(server.proc.wait, 20) == 0
    await client.close()
    assert not server.socket.exists() and not pid_alive(kernel_pid)


def test_stale_socket_is_replaced_and_a_live_one_is_not() -> None:
    with tempfile.TemporaryDirectory(prefix="act-") as base:
        sock_dir = Path(base) / "sock"
        sock_dir.mkdir()
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(sock_dir / "action.sock"))
        stale.close()  # the file stays, nobody listens: what a crash leaves behind
        first = start_server(Path(base))
        try:
            second = subprocess.run(
                [sys.executable, "-m", "agentroll.runtime.action", "--socket", str(first.socket)],
                capture_output=True,
                timeout=30,
                check=False,
            )
            assert second.returncode == 1
            assert b"already serving" in second.stderr
        finally:
            first.stop()


def test_ready_path_does_not_import_heavy_modules() -> None:
    code = (
        "import sys, agentroll.runtime.action.__main__, agentroll.runtime.action.server\n"
        "print(sorted(m for m in ('jupyter_client', 'zmq', 'pydantic', 'IPython', 'fastapi')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30, check=True)
    assert out.stdout.decode().strip() == "[]"
