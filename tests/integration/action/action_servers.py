"""Start and stop real action servers (subprocesses on temporary sockets) for the tests."""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_CMD = (sys.executable, "-m", "agentroll.runtime.action")


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    socket: Path
    workdir: Path
    base: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def start_server(base: Path, *extra: str, env: dict[str, str] | None = None) -> ServerProcess:
    """Start ``python -m agentroll.runtime.action`` and wait for its socket to answer.

    A ``--single-client`` server serves only its first connection, so for it the wait is
    for the socket to exist, and the test's own client is that first connection.
    """
    sock_dir = base / "sock"
    workdir = base / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    sock = sock_dir / "action.sock"
    proc = subprocess.Popen(
        [*SERVER_CMD, "--socket", str(sock), "--workdir", str(workdir), *extra],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )
    ready = sock.exists if "--single-client" in extra else lambda: _accepts(sock)
    deadline = time.monotonic() + 20
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            raise RuntimeError(f"action server did not start (rc={proc.returncode})")
        time.sleep(0.01)
    return ServerProcess(proc, sock, workdir, base)


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie counts as gone: only its parent can reap it.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
