"""Real agentroll processes for end-to-end tests: started owned, stopped by process group."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
        self.popen.wait(timeout=30)


@contextmanager
def agentroll_process(args: list[str], workdir: Path, name: str, **env: str) -> Iterator[Proc]:
    """Run `agentroll ARGS --url-file ...` in its own session; yields once it listens."""
    url_file = workdir / f"{name}.url"
    url_file.unlink(missing_ok=True)
    log = workdir / f"{name}.log"
    with log.open("ab") as sink:
        popen = subprocess.Popen(
            [sys.executable, "-m", "agentroll.server.cli", *args, "--url-file", str(url_file)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    proc = Proc(popen, "", log)
    try:
        deadline = time.monotonic() + 60
        while not url_file.exists():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        proc.url = url_file.read_text().strip()
        yield proc
    finally:
        proc.kill(signal.SIGKILL)
