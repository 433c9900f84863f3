"""Launching agentroll processes (`serve`, `scripted-llm`) owned by the caller.

Each runs in its own session and is stopped by its process group, never by name; the
caller learns its URL from the `--url-file` it writes once bound, and a server's token from
where the server keeps it. Used by end-to-end tests, benchmarks and launchers.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentroll.server.schema.auth import (
    API_TOKEN_ENV,
    DEFAULT_DB_PATH,
    TOKEN_FILE_ENV,
    default_token_file,
    read_token_file,
)


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str
    log: Path
    token: str | None = None
    """A `serve` process's API token (configured, or the one it generated); None otherwise."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 30.0) -> None:
        """Signal the whole process group and reap it; SIGKILL if it outlives `timeout_s`."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=timeout_s)


@contextmanager
def agentroll_process(
    args: list[str],
    workdir: Path,
    name: str,
    *,
    start_timeout_s: float = 60.0,
    nice: int = 0,
    env: Mapping[str, str] | None = None,
) -> Iterator[Proc]:
    """Run `agentroll ARGS --url-file ...` in its own session; yields once it listens.

    Output goes to `workdir/NAME.log`; on exit the process group gets SIGKILL if still alive.
    `env` is added to this process's environment. `nice` lowers its CPU priority (e.g. a
    scripted backend standing in for GPU servers on other nodes, which would not compete with
    the server under test for its cores).
    """
    url_file = workdir / f"{name}.url"
    url_file.unlink(missing_ok=True)
    log = workdir / f"{name}.log"
    with log.open("ab") as sink:
        niced = ["nice", "-n", str(nice)] if nice else []
        popen = subprocess.Popen(
            [
                *niced,
                sys.executable,
                "-m",
                "agentroll.server.cli",
                *args,
                "--url-file",
                str(url_file),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    proc = Proc(popen, "", log)
    try:
        deadline = time.monotonic() + start_timeout_s
        while not url_file.exists():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        proc.url = url_file.read_text().strip()
        proc.token = _server_token(args, {**os.environ, **(env or {})})
        yield proc
    finally:
        proc.kill(signal.SIGKILL)


def _server_token(args: list[str], env: Mapping[str, str]) -> str | None:
    """The token of a `serve` process started with `args` and `env` (bound already, so a
    generated token is on disk): configured, or read where the server keeps it. Settings from
    a `--config` file are not looked at (pass `--db` or the environment): None if the token
    is not found."""
    if args[:1] != ["serve"]:
        return None
    if configured := env.get(API_TOKEN_ENV):
        return configured
    db = args[args.index("--db") + 1] if "--db" in args else env.get("AGENTROLL_DB_PATH")
    named = env.get(TOKEN_FILE_ENV)
    path = Path(named) if named else default_token_file(Path(db) if db else DEFAULT_DB_PATH)
    try:
        return read_token_file(path)
    except FileNotFoundError:
        return None
