"""Start and stop real action servers (subprocesses on temporary sockets) for the tests."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_CMD = (sys.executable, "-m", "agentroll.runtime.action")
FREEZER = Path("/sys/fs/cgroup/freezer")
needs_freezer = pytest.mark.skipif(
    not os.access(FREEZER / "cgroup.procs", os.W_OK),
    reason="needs the cgroup v1 freezer, writable (root): make test runs as root there",
)


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


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """Hold ``pid`` frozen (cgroup v1 freezer): a SIGKILL sent meanwhile stays pending, as it
    does for a process on a busy node that has not run since it was killed."""
    group = FREEZER / f"agentroll-test-{os.getpid()}-{pid}"
    group.mkdir()
    try:
        (group / "cgroup.procs").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        for _ in range(500):
            if (group / "freezer.state").read_text().strip() == "FROZEN":
                break
            time.sleep(0.01)
        yield
    finally:
        (group / "freezer.state").write_text("THAWED")
        with contextlib.suppress(OSError):  # gone by now, if it was killed
            (FREEZER / "cgroup.procs").write_text(str(pid))
        for _ in range(500):
            try:
                group.rmdir()
                break
            except OSError:  # a killed process leaves its group once it has exited
                time.sleep(0.01)
