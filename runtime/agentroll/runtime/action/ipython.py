"""A persistent IPython kernel reached directly with jupyter_client (no kernel gateway).

The kernel starts on the first call (jupyter_client and zmq are imported only then, so the
action server itself becomes ready fast). It talks over ZeroMQ ``ipc`` sockets whose files live
in the server's private state directory -- no TCP port, nothing in a shared /tmp.

The kernel is the agent's: when it dies (killed by the agent's own processes, out of memory),
the call reports how it ended, a fresh kernel is started and the call returns normally; killed
between two calls, the fresh kernel runs the second call's code. It is
confined to the agent's limits only once it is ready: its own start (threads, imports) must
not fail because the agent has used up its processes or memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import subprocess
import time
from collections.abc import Mapping
from typing import IO, Any

from agentroll.runtime.action.children import Children, describe_exit, doomed
from agentroll.runtime.action.regular import open_regular
from agentroll.runtime.action.truncate import HeadTailBuffer, truncate_text

START_TIMEOUT_S = 60.0
INTERRUPT_GRACE_S = 3.0
SHUTDOWN_TIMEOUT_S = 5.0
LIVENESS_POLL_S = 0.5  # how often a long execution checks that the kernel is still alive
DEATH_WAIT_S = 2.0  # for a kernel found with a SIGKILL pending to finish dying
MAX_IPC_PATH = 100  # AF_UNIX paths are limited to 107 bytes; jupyter adds "-<n>"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class _Collected:
    """Output of one execution, bounded."""

    def __init__(self, limit: int) -> None:
        self.output = HeadTailBuffer(limit)
        self.error: str | None = None
        self.idle = False
        self.reply_status: str | None = None

    def add(self, msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            self.output.feed(content.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            data = content.get("data", {})
            if "text/plain" in data:
                text = str(data["text/plain"])
            else:
                text = "[display: " + ", ".join(sorted(data)) + "]"
            self.output.feed(text if text.endswith("\n") else text + "\n")
        elif kind == "error":
            trace = "\n".join(content.get("traceback", [])) or (
                f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
            )
            self.error = strip_ansi(trace)
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True


class PythonSession:
    """One kernel per action server; executions serialize on a lock."""

    def __init__(
        self,
        *,
        workdir: str,
        state_dir: str,
        children: Children,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self._state_dir = state_dir
        self._children = children
        self._env = dict(os.environ if env is None else env)
        self._env.setdefault("MPLBACKEND", "Agg")
        # IPython's profile and Jupyter's runtime files go to the private directory, not into
        # $HOME -- which in a sandbox is often the task's repository.
        self._env.setdefault("IPYTHONDIR", os.path.join(state_dir, "ipython"))
        self._env.setdefault("JUPYTER_RUNTIME_DIR", os.path.join(state_dir, "jupyter-runtime"))
        self._km: Any = None  # AsyncKernelManager
        self._kc: Any = None  # AsyncKernelClient
        self._log: IO[bytes] | None = None
        self._lock = asyncio.Lock()
        self._interrupt_requested = False
        self._closed = False

    @property
    def started(self) -> bool:
        return self._km is not None

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def _open_log(self) -> IO[bytes]:
        # The kernel's own stdout/stderr (crash messages); its cell output comes over IOPub.
        path = os.path.join(self._state_dir, "kernel.log")
        try:
            fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:  # replaced by the agent (a FIFO, a link): no crash log, no hang
            fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        return os.fdopen(fd, "ab")

    async def _start(self) -> None:
        if self._closed:
            raise RuntimeError("python session is closed")
        # Looking up the kernel spec imports IPython here too, which creates its directory.
        os.environ.setdefault("IPYTHONDIR", self._env["IPYTHONDIR"])
        from jupyter_client.manager import AsyncKernelManager

        connection_file = os.path.join(self._state_dir, "kernel.json")
        ipc_base = os.path.join(self._state_dir, "k")
        # Fall back to loopback TCP only when the private directory's path is too long for ipc.
        if len(ipc_base) <= MAX_IPC_PATH:
            km = AsyncKernelManager(
                kernel_name="python3",
                connection_file=connection_file,
                transport="ipc",
                ip=ipc_base,
            )
        else:
            km = AsyncKernelManager(kernel_name="python3", connection_file=connection_file)
        if self._log is None:
            self._log = self._open_log()
        async with asyncio.timeout(START_TIMEOUT_S):
            await km.start_kernel(
                cwd=self.workdir,
                env=self._env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                extra_arguments=["--HistoryManager.enabled=False"],
            )
            provisioner: Any = km.provisioner  # a LocalProvisioner: the kernel is its process
            self._children.own(provisioner.pid)
            try:
                kc = km.client()
                kc.start_channels()
                await kc.wait_for_ready(timeout=START_TIMEOUT_S)
            except BaseException:
                await self._shutdown(km, None)
                raise
        self._children.confine(provisioner.pid)
        self._km, self._kc = km, kc

    async def start(self) -> None:
        """Start the kernel now (idempotent), so the first cell costs what any other does."""
        async with self._lock:
            if self._km is None:
                began = time.monotonic()
                await self._start()
                await self._warm_cell(began + START_TIMEOUT_S)

    async def _warm_cell(self, deadline: float) -> None:
        # A kernel's first execution pays one-time set-up of its own (about half as much again
        # as a later cell): paid here, by a cell that leaves no history, output or count. Best
        # effort, within the start's own time: a kernel that dies here (the task's preparation
        # used up its memory) is dropped and the first call starts a fresh one, as it would
        # without warm-up; one still busy with the cell finishes it before the first call's.
        msg_id = self._kc.execute("pass", silent=False, store_history=False)
        if await self._collect(msg_id, _Collected(0), deadline, interruptible=False) == "dead":
            await self._discard()

    async def run(self, code: str, *, time_limit: float, max_output_chars: int) -> dict[str, Any]:
        async with self._lock:
            started = time.monotonic()
            notes: list[str] = []
            restarted = False
            if self._km is None:
                await self._start()
            elif await self._killed_since_last_call():
                ended, restarted = await self._replace_dead_kernel(), True
                notes.append(
                    f"[the Python kernel died after the previous call: it {ended}; a new kernel"
                    " ran this code and state was lost]"
                )
            self._interrupt_requested = False
            collected = _Collected(max_output_chars)
            msg_id = self._kc.execute(
                code, store_history=True, allow_stdin=False, stop_on_error=False
            )
            outcome = await self._collect(msg_id, collected, started + time_limit)
            if outcome in ("timeout", "interrupt"):
                await self._km.interrupt_kernel()
                grace = time.monotonic() + INTERRUPT_GRACE_S
                if outcome == "timeout":
                    notes.append(
                        f"[execution timed out after {time_limit:g} s and was interrupted]"
                    )
                else:
                    notes.append("[execution interrupted]")
                if await self._collect(msg_id, collected, grace, interruptible=False) != "idle":
                    await self._restart()
                    restarted = True
                    notes.append("[the kernel did not stop; it was restarted and state was lost]")
            elif outcome == "dead":
                ended, restarted = await self._replace_dead_kernel(), True
                notes.append(
                    f"[the Python kernel died: it {ended}; it was restarted and state was lost]"
                )
            text, truncated = collected.output.text()
            if notes:
                text = text + ("" if not text or text.endswith("\n") else "\n") + "\n".join(notes)
            error = collected.error
            if error is not None:
                error, cut = truncate_text(error, max_output_chars)
                truncated = truncated or cut
            return {
                "output": text,
                "error": error,
                "timed_out": outcome == "timeout",
                "truncated": truncated,
                "duration_s": round(time.monotonic() - started, 6),
                "interrupted": outcome == "interrupt",
                "kernel_restarted": restarted,
            }

    async def _replace_dead_kernel(self) -> str:
        """Start a new kernel in place of the dead one; how that one ended, for the agent."""
        status = await self._km.provisioner.poll()
        await self._restart()
        return describe_exit(status)

    async def _killed_since_last_call(self) -> bool:
        """By the agent's `kill -9 -1` from bash, say: then a new kernel runs this call's code.

        Asked of the process, not only `waitpid`: a kernel killed a moment ago may not have
        run to its death yet, and would take the code with it.
        """
        provisioner: Any = self._km.provisioner
        if not doomed(provisioner.pid):
            return not await self._km.is_alive()
        deadline = time.monotonic() + DEATH_WAIT_S  # for its exit status, to tell the agent
        while await provisioner.poll() is None:
            if time.monotonic() >= deadline:
                break  # the restart kills it
            await asyncio.sleep(0.01)
        return True

    async def _collect(
        self, msg_id: str, collected: _Collected, deadline: float, *, interruptible: bool = True
    ) -> str:
        """Read IOPub until our execution goes idle. Returns idle, timeout, interrupt or dead."""
        next_liveness = time.monotonic() + LIVENESS_POLL_S
        while not collected.idle:
            if interruptible and self._interrupt_requested:
                return "interrupt"
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if now >= next_liveness:
                if not await self._km.is_alive():
                    return "dead"
                next_liveness = now + LIVENESS_POLL_S
            wait = min(deadline, next_liveness) - now
            try:
                msg = await self._kc.get_iopub_msg(timeout=max(wait, 0.001))
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                collected.add(msg)
        await self._drain_shell_reply(msg_id, deadline)
        return "idle"

    async def _drain_shell_reply(self, msg_id: str, deadline: float) -> None:
        # The reply precedes "idle"; read it so the shell channel does not pile up.
        with contextlib.suppress(queue.Empty):
            while True:
                wait = max(deadline - time.monotonic(), 0.05)
                reply = await self._kc.get_shell_msg(timeout=min(wait, 1.0))
                if reply.get("parent_header", {}).get("msg_id") == msg_id:
                    return

    def interrupt(self) -> bool:
        if not self.busy or self._km is None:
            return False
        self._interrupt_requested = True
        return True

    async def _restart(self) -> None:
        await self._discard()
        await self._start()

    async def _discard(self) -> None:
        km, kc = self._km, self._kc
        self._km = self._kc = None
        await self._shutdown(km, kc)

    async def _shutdown(self, km: Any, kc: Any) -> None:
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        if km is None:
            return
        pid = getattr(km.provisioner, "pid", None)  # the provisioner goes with the shutdown
        try:
            async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                await km.shutdown_kernel(now=True)
        except Exception:
            # Last resort: the kernel runs in its own session, so its group is only its own.
            with contextlib.suppress(Exception):
                await km.signal_kernel(9)
        with contextlib.suppress(Exception):
            await km.cleanup_resources()
        if pid is not None:
            self._children.disown(pid)  # reaped; if not, the orphan reaper will

    async def reset(self) -> None:
        """Kill the kernel (after the call in flight, if any); the next call starts a fresh one."""
        async with self._lock:
            await self._discard()

    async def close(self) -> None:
        self._closed = True
        self._interrupt_requested = True
        await self._discard()
        if self._log is not None:
            self._log.close()
            self._log = None
