"""One persistent bash in a pseudo-terminal (ptyprocess), driven without blocking the loop.

How a command runs: the command is ANSI-C quoted into a single ``eval $'...'`` line followed by
``printf`` of a per-call sentinel carrying ``$?``. One line means bash parses all of it before
running anything, so a command that reads stdin (``cat``) cannot swallow the sentinel, and a
syntax error is reported by ``eval`` instead of leaving bash waiting for more input. Commands
too long for the tty's 4 KiB line buffer go through a file in the private state directory.

The pty master is read with ``loop.add_reader``; bytes flow into a scanner that looks for the
sentinel and keeps a bounded head/tail of everything before it.

Bash is the agent's: the agent may kill it, during a command or between two (``kill -9 -1``
from the Python tool). Killed between two, the next call reports how bash ended and that a new
one, with reset state, ran the command; the call never fails for it. A SIGKILL lands when its
target next runs, so a bash killed by the previous call may still look alive when the next one
comes; each line therefore prints a start marker first, and a bash that ends before printing it
never ran the command, which a new bash then runs, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import termios
import time
from collections.abc import Callable, Mapping
from typing import Any

from ptyprocess import PtyProcess

from agentroll.runtime.action.children import Children, describe_exit, doomed
from agentroll.runtime.action.regular import open_regular
from agentroll.runtime.action.shell_io import (
    Scanner,
    ansi_c_quote,
    sentinel_command,
    start_command,
)

BASH_ARGV = ("bash", "--noprofile", "--norc", "--noediting")
# Keeps tools from waiting on a human: no pagers, no prompts, no colours.
NON_INTERACTIVE_ENV = {
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "PS1": "",
    "PS2": "",
    "PS0": "",
}
DROPPED_ENV = ("PROMPT_COMMAND", "BASH_ENV", "ENV", "HISTFILE")
MAX_LINE_BYTES = 3000  # tty canonical mode keeps at most 4095 bytes per line
START_TIMEOUT_S = 15.0
SIGINT_GRACE_S = 1.0  # for the foreground job to die after SIGINT
KILL_GRACE_S = 1.0  # after SIGKILL of the foreground job
RECOVERY_TIMEOUT_S = 2.0  # for bash to answer the recovery sentinel
RESET_NOTE = "working directory, variables and functions were reset"
RAN_IN_NEW_BASH = f"a new bash session ran this one: {RESET_NOTE}"


def _quiet_tty() -> None:
    """In the child, before bash starts: no echo, and newlines stay newlines (no CR added).

    Set before exec, not after: bash saves the terminal's modes when it starts and puts them
    back whenever a job is killed by a signal (an out-of-memory kill, say); modes set later
    would be undone then, in the middle of a command, and its end marker come out mangled.
    """
    attrs = termios.tcgetattr(0)
    attrs[1] &= ~termios.ONLCR
    attrs[3] &= ~(termios.ECHO | termios.ECHONL)
    termios.tcsetattr(0, termios.TCSANOW, attrs)


class BashSession:
    """A persistent bash; calls serialize on one lock, ``interrupt`` may come from any task."""

    def __init__(
        self,
        *,
        workdir: str,
        state_dir: str,
        children: Children,
        env: Mapping[str, str] | None = None,
    ):
        self.workdir = workdir
        self._state_dir = state_dir
        self._children = children
        base = dict(os.environ if env is None else env)
        for name in DROPPED_ENV:
            base.pop(name, None)
        base.update(NON_INTERACTIVE_ENV)
        self._env = base
        self._proc: Any = None  # PtyProcess
        self._fd = -1
        self._tty_attrs: list[Any] = []
        self._scanner: Scanner | None = None
        self._wake = asyncio.Event()
        self._eof = False
        self._last_output = 0.0
        self._interrupt_requested = False
        self._needs_recovery = False
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def running(self) -> bool:
        return self._proc is not None and not self._eof

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def start(self) -> None:
        """Start bash (idempotent) and wait until it answers."""
        async with self._lock:
            if not self.running:
                await self._spawn()

    async def _spawn(self) -> None:
        if self._closed:
            raise RuntimeError("bash session is closed")
        # A bounded fork+exec (a few ms); ptyprocess has no async spawn.
        proc = PtyProcess.spawn(
            list(BASH_ARGV),
            cwd=self.workdir,
            env=self._env,
            echo=False,
            dimensions=(40, 200),
            preexec_fn=_quiet_tty,
        )
        self._proc, self._fd, self._eof = proc, proc.fd, False
        self._children.own(proc.pid)
        self._children.confine(proc.pid)
        self._tty_attrs = termios.tcgetattr(self._fd)
        os.set_blocking(self._fd, False)
        asyncio.get_running_loop().add_reader(self._fd, self._on_readable)
        nonce = secrets.token_hex(8)
        init = (
            "PS1=''; PS2=''; PS0=''; unset PROMPT_COMMAND HISTFILE; set +o history; "
            f"cd {ansi_c_quote(self.workdir)}; {sentinel_command(nonce)}\n"
        )
        scanner = Scanner(4096, nonce)
        self._scanner = scanner
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            await self._write(init.encode(), deadline)
            await self._wait(scanner, deadline, None, interruptible=False)
        finally:
            self._scanner = None
        if not scanner.found:
            text, _ = scanner.finish()
            await self._kill()
            raise RuntimeError(f"bash did not start within {START_TIMEOUT_S} s: {text[-500:]!r}")

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: every slave fd closed, bash is gone
            data = b""
        if not data:
            self._eof = True
            asyncio.get_running_loop().remove_reader(self._fd)
        else:
            self._last_output = time.monotonic()
            if self._scanner is not None:
                self._scanner.feed(data)
        self._wake.set()

    async def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                written = 0
            except OSError:
                return  # bash is gone; the caller notices through EOF
            view = view[written:]
            if view:
                if time.monotonic() > deadline:
                    return
                await asyncio.sleep(0.005)

    async def _wait(
        self,
        scanner: Scanner,
        deadline: float,
        quiet_s: float | None,
        *,
        interruptible: bool = True,
    ) -> str:
        """Wait for the sentinel. Returns found, eof, interrupt, timeout or quiet."""
        while True:
            if scanner.found:
                return "found"
            if self._eof:
                return "eof"
            if interruptible and self._interrupt_requested:
                return "interrupt"
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            wait = deadline - now
            if quiet_s is not None:
                quiet_left = self._last_output + quiet_s - now
                if quiet_left <= 0:
                    return "quiet"
                wait = min(wait, quiet_left)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def interrupt(self) -> bool:
        """Ask the running command (if any) to stop; the running ``run`` call reports it."""
        if not self.busy:
            return False
        self._interrupt_requested = True
        self._wake.set()
        return True

    async def run(
        self,
        command: str,
        *,
        time_limit: float,
        no_output_timeout: float | None = None,
        max_output_chars: int = 30_000,
    ) -> dict[str, Any]:
        async with self._lock:
            started = time.monotonic()
            notes: list[str] = []
            restarted = False
            if self._needs_recovery:
                # A call was cancelled mid-command: get the shell back to a prompt first.
                self._needs_recovery = False
                if self.running and not await self._recover(Scanner(4096, "0" * 16)):
                    restarted = True
                    notes.append("[the previous command was abandoned; bash was restarted]")
            if self._proc is not None and (
                self._eof or not self._proc.isalive() or doomed(self._proc.pid)
            ):
                # Killed since the last call (by the agent's own processes): say so. Asked
                # directly: the pty's end of file may still wait in the event loop, and a
                # SIGKILL still pending (a busy node) leaves bash looking alive.
                status = await self._reap()
                notes.append(
                    f"[bash {describe_exit(status)} after the previous command; {RAN_IN_NEW_BASH}]"
                )
                restarted = True
                # Now: its pty's end of file may be unseen yet, and an unstaged call keeps it.
                await self._respawn()
            if not self.running:
                await self._respawn()
            self._interrupt_requested = False
            try:
                return await self._run_locked(
                    command,
                    started,
                    time_limit,
                    no_output_timeout,
                    max_output_chars,
                    notes,
                    restarted,
                )
            except asyncio.CancelledError:
                self._needs_recovery = True
                raise
            finally:
                self._scanner = None
                self._interrupt_requested = False

    async def _run_locked(
        self,
        command: str,
        started: float,
        time_limit: float,
        quiet_s: float | None,
        limit: int,
        notes: list[str],
        restarted: bool,
    ) -> dict[str, Any]:
        deadline = started + time_limit
        while True:
            nonce = secrets.token_hex(8)
            scanner = Scanner(limit, nonce)
            self._scanner = scanner
            self._last_output = time.monotonic()
            self._restore_tty()
            try:
                line = self._command_line(command, nonce)
            except OSError as exc:  # its state folder is in the agent's reach (a full /tmp)
                notes.append(f"[the command could not be staged: {exc.strerror}]")
                return self._unstaged(notes, started, restarted)
            await self._write(line, deadline)
            outcome = await self._wait(scanner, deadline, quiet_s)
            if outcome != "eof" or scanner.started or restarted:
                break
            # Bash died before the line began (killed by the agent's last call, but still
            # alive when this one came): the command never ran, so a new bash runs it. An
            # end of file from a bash still alive proves nothing, so that is not retried, nor
            # is a call out of time.
            status = await self._reap()
            if status is None or time.monotonic() >= deadline:
                break
            notes.append(f"[bash {describe_exit(status)} before this command; {RAN_IN_NEW_BASH}]")
            with contextlib.suppress(OSError):  # a long command's file, never read
                os.unlink(self._command_file(nonce))
            await self._respawn()
            restarted = True
        exit_code: int | None = scanner.exit_code
        timed_out = outcome in ("timeout", "quiet")
        if outcome == "eof":
            status = await self._reap()
            exit_code = status if status is not None and status >= 0 else None
            notes.append(
                f"[bash {describe_exit(status)}; a new bash session was started: {RESET_NOTE}]"
            )
            await self._respawn()
            restarted = True
        elif outcome != "found":
            exit_code = None
            if outcome == "timeout":
                notes.append(f"[command timed out after {time_limit:g} s and was interrupted]")
            elif outcome == "quiet":
                notes.append(f"[no output for {quiet_s:g} s; the command was interrupted]")
            else:
                notes.append("[command interrupted]")
            if not await self._recover(scanner):
                notes.append(
                    f"[bash did not recover; a new bash session was started: {RESET_NOTE}]"
                )
                restarted = True
        text, truncated = scanner.finish()
        if notes:
            text = text + ("" if not text or text.endswith("\n") else "\n") + "\n".join(notes)
        return {
            "output": text,
            "exit_code": exit_code,
            "timed_out": timed_out,
            "truncated": truncated,
            "duration_s": round(time.monotonic() - started, 6),
            "interrupted": outcome == "interrupt",
            "session_restarted": restarted,
        }

    @staticmethod
    def _unstaged(notes: list[str], started: float, restarted: bool) -> dict[str, Any]:
        """A call that never reached bash: what happened (a restart too), as the observation."""
        return {
            "output": "\n".join(notes),
            "exit_code": None,
            "timed_out": False,
            "truncated": False,
            "duration_s": round(time.monotonic() - started, 6),
            "interrupted": False,
            "session_restarted": restarted,
        }

    def _command_file(self, nonce: str) -> str:
        return os.path.join(self._state_dir, f"bash-command-{nonce}")

    def _command_line(self, command: str, nonce: str) -> bytes:
        # `&&`: a start marker that could not be written (a hung-up tty) means no command.
        start, end = start_command(nonce), sentinel_command(nonce)
        line = f"{start} && eval {ansi_c_quote(command)}; {end}\n"
        encoded = line.encode("utf-8", errors="replace")
        if len(encoded) <= MAX_LINE_BYTES:
            return encoded
        # A fresh name, created exclusively: nothing the agent planted (a FIFO) is opened.
        path = self._command_file(nonce)
        os.makedirs(self._state_dir, mode=0o700, exist_ok=True)  # the agent may have removed it
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(command.replace("\x00", ""))
        # `read -d ''` fails at the end of the file by design: `|| :` keeps the agent's own
        # `set -e` from ending bash on it.
        return (
            f"{start} && {{ IFS= read -r -d '' __ar_cmd < {ansi_c_quote(path)} || :; "
            f'eval "$__ar_cmd"; }}; '
            f"{end}; unset __ar_cmd; rm -f {ansi_c_quote(path)}\n"
        ).encode()

    def _restore_tty(self) -> None:
        # A program killed mid-way (an editor, a pager) can leave the tty echoing or raw.
        try:
            if termios.tcgetattr(self._fd) != self._tty_attrs:
                termios.tcsetattr(self._fd, termios.TCSANOW, self._tty_attrs)
        except termios.error:
            pass  # bash is gone; the caller notices through EOF

    def _foreground_pgrp(self) -> int:
        try:
            return os.tcgetpgrp(self._fd)
        except OSError:
            return -1

    def _signal_group(self, pgrp: int, sig: int) -> None:
        if pgrp > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgrp, sig)

    @staticmethod
    async def _until(predicate: Callable[[], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not predicate():
            if time.monotonic() >= deadline:
                return predicate()
            await asyncio.sleep(0.01)
        return True

    async def _recover(self, scanner: Scanner) -> bool:
        """SIGINT the foreground job (SIGKILL if it ignores that), then prove bash answers.

        Returns False when the shell had to be replaced.
        """
        self._interrupt_requested = False
        bash_pid = self._proc.pid
        with contextlib.suppress(OSError):
            termios.tcflush(self._fd, termios.TCIFLUSH)  # drop unread keystrokes
        self._signal_group(self._foreground_pgrp(), signal.SIGINT)

        def at_prompt() -> bool:
            return self._eof or self._foreground_pgrp() == bash_pid

        if not await self._until(at_prompt, SIGINT_GRACE_S):
            self._signal_group(self._foreground_pgrp(), signal.SIGKILL)
            await self._until(at_prompt, KILL_GRACE_S)
        if not self._eof and at_prompt():
            nonce = secrets.token_hex(8)
            scanner.expect(nonce)
            self._scanner = scanner
            deadline = time.monotonic() + RECOVERY_TIMEOUT_S
            await self._write(f"{sentinel_command(nonce)}\n".encode(), deadline)
            if await self._wait(scanner, deadline, None, interruptible=False) == "found":
                return True
        await self._respawn()
        return False

    async def _respawn(self) -> None:
        await self._kill()
        await self._spawn()

    async def _reap(self) -> int | None:
        """Wait (bounded) for bash to be reaped; its exit status, or -signal."""
        proc = self._proc
        if proc is None:
            return None
        await self._until(lambda: not proc.isalive(), 2.0)
        if proc.isalive():
            return None
        if proc.signalstatus is not None:
            return -int(proc.signalstatus)
        return None if proc.exitstatus is None else int(proc.exitstatus)

    async def _kill(self) -> None:
        """Stop bash and its jobs: SIGHUP (bash forwards it to its jobs), then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        fg = self._foreground_pgrp()
        if not self._eof:
            asyncio.get_running_loop().remove_reader(self._fd)
            self._eof = True
        if proc.isalive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGHUP)
            if fg != proc.pid:
                self._signal_group(fg, signal.SIGHUP)
            if not await self._until(lambda: not proc.isalive(), 0.5):
                self._signal_group(fg, signal.SIGKILL)
                self._signal_group(proc.pid, signal.SIGKILL)
                await self._until(lambda: not proc.isalive(), 2.0)
        # ptyprocess sleeps (blocking) after close/terminate unless told not to.
        proc.delayafterclose = proc.delayafterterminate = 0.0
        with contextlib.suppress(Exception):
            proc.close(force=False)  # closing the master hangs up anything left on the pty
        self._fd = -1
        self._children.disown(proc.pid)  # reaped; if not, the orphan reaper will

    async def reset(self) -> None:
        """Kill bash (after the call in flight, if any); the next call starts a fresh one."""
        async with self._lock:
            self._needs_recovery = False
            await self._kill()

    async def close(self) -> None:
        self._closed = True
        self._interrupt_requested = True
        self._wake.set()
        await self._kill()
