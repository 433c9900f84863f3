"""Behaviour shared by every backend: launch, readiness, exec, owned teardown, leases.

A sandbox is one launcher process (bwrap, the Apptainer exec of the action server, or the
action server itself for ``local``) in its own session, plus whatever it spawned. Teardown is
always the same: ask the action server to shut down, wait ``grace_s``, SIGKILL the launcher's
process group, then scan for anything still carrying the sandbox's markers (environment
marker, PID namespace, cgroup, backend cmdline marker) until none is left. ``stop_agent``
asks the action server to kill every process the agent started, and leaves the server up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from agentroll.runtime import procs
from agentroll.runtime.action.errors import ActionError
from agentroll.runtime.base import ExecResult, SandboxSpec
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.cpulimit import GRADING_CPU_SHARE, CpuLimit, grading_usage
from agentroll.runtime.errors import (
    ContainmentError,
    SandboxClosed,
    SandboxError,
    SandboxStartError,
)
from agentroll.runtime.lease import Lease

if TYPE_CHECKING:
    from agentroll.runtime.action.client import ActionClient

log = logging.getLogger(__name__)

SOCKET_NAME = "action.sock"
_VERIFY_ROUNDS = 20


def open_log(path: Path) -> BinaryIO:
    """Append-open the launcher's log (a local file; the child gets the descriptor)."""
    return open(path, "ab")


async def spawn(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``create_subprocess_exec`` whose process is never lost to a cancellation.

    Cancelled half-way, a plain call forks the child but drops its handle, so nobody owns it.
    Here the start finishes, the caller's cancellation then kills and reaps the child.
    """
    start = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **kwargs))
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            proc = await start
            procs.kill_led_group(proc)
            await proc.wait()
        raise


async def read_until_eof(fd: int, deadline: float) -> bytes:
    """Everything written to the pipe ``fd`` until its writers close it; ``fd`` is closed.

    Read with a plain reader callback and closed exactly once here: handing the fd to
    `connect_read_pipe` wrapped in a file object makes uvloop and the file both close it,
    and under load the reused descriptor number then aborts the event loop (uvloop #763).
    """
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            if not done.done():
                done.set_exception(exc)
            return
        if data:
            chunks.append(data)
        elif not done.done():
            done.set_result(None)  # end of file: every writer closed its end

    loop.add_reader(fd, readable)
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
        async with asyncio.timeout(max(deadline - loop.time(), 0.1)):
            await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return b"".join(chunks)


class ProcessSandbox:
    """A sandbox whose lifetime is one owned launcher process. Backends override the hooks."""

    def __init__(
        self,
        *,
        sandbox_id: str,
        spec: SandboxSpec,
        base_dir: Path,
        workdir: Path | None,
        address: str | None,
        lease: Lease,
        scanner: procs.ProcScanner,
        cgroup: SandboxCgroup | None = None,
    ) -> None:
        self.id = sandbox_id
        self.spec = spec
        self.base_dir = base_dir
        self.socket_dir = base_dir / "sock"
        self.workdir = workdir
        self.address = address
        self.lease = lease
        self.cgroup = cgroup
        self._scanner = scanner
        self._proc: asyncio.subprocess.Process | None = None
        self._tools: ActionClient | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self.pidns: procs.PidNamespace | None = None

    # ----- what backends provide -------------------------------------------------------
    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """Host command line that runs ``argv`` inside this sandbox."""
        raise NotImplementedError

    @contextlib.contextmanager
    def exec_command(
        self, argv: Sequence[str], cgroup: SandboxCgroup | None = None
    ) -> Iterator[list[str]]:
        """``exec_argv`` for one exec; a backend that must hold something open while the
        command runs (or refuse to run it) overrides this instead. ``cgroup``: where the
        command runs instead of the sandbox's own cgroup (a backend with cgroups joins it)."""
        yield self.exec_argv(argv)

    def exec_env(self) -> dict[str, str] | None:
        """Environment of the host-side exec helper (None: the sandbox env, see local)."""
        return {"PATH": "/usr/bin:/bin"}

    def exec_cwd(self) -> str | None:
        return None

    def cmdline_marker(self) -> bytes | None:
        return None

    async def _terminate_extra(self, grace_s: float) -> None:
        """Backend-specific teardown before the marker scan (e.g. ``instance stop``)."""

    def _kill_inner(self) -> None:
        """SIGKILL the sandbox from the inside out, so its own parent reaps it (no zombies)."""

    # ----- common behaviour --------------------------------------------------------------
    @property
    def socket_path(self) -> Path:
        return self.socket_dir / SOCKET_NAME

    @property
    def tools(self) -> ActionClient:
        if self._tools is None:
            raise SandboxClosed(f"sandbox {self.id} has no action server (not started)")
        return self._tools

    @property
    def stopped(self) -> bool:
        return self._stop_task is not None

    @property
    def alive(self) -> bool:
        """Started, not stopped, and its launcher still running."""
        return self._stop_task is None and self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    #: CPU niceness of the launcher and of every exec (set by the runtime from its config).
    nice: int = 0

    def _niced(self, argv: Sequence[str]) -> list[str]:
        return ["nice", "-n", str(self.nice), *argv] if self.nice else list(argv)

    async def launch(
        self, argv: Sequence[str], env: Mapping[str, str], *, pass_fds: Sequence[int] = ()
    ) -> None:
        """Start the launcher in its own session; stdout/stderr go to a file, never a pipe."""
        with open_log(self.base_dir / "log") as logf:
            try:
                self._proc = await spawn(
                    *self._niced(argv),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=logf,
                    stderr=logf,
                    env=dict(env),
                    start_new_session=True,
                    pass_fds=tuple(pass_fds),
                )
            except OSError as exc:
                raise SandboxStartError(f"cannot run {argv[0]}: {exc}") from exc

    def log_tail(self, limit: int = 2000) -> str:
        try:
            data = (self.base_dir / "log").read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace").strip()

    async def wait_ready(self, timeout: float) -> None:  # noqa: ASYNC109 (deadline math)
        """Connect the action client; fail fast (with the launcher's log) if the launcher dies."""
        from agentroll.runtime.action.client import ActionClient

        assert self._proc is not None
        client = ActionClient(str(self.socket_path))
        connect = asyncio.ensure_future(client.connect(timeout))
        died = asyncio.ensure_future(self._proc.wait())
        try:
            done, _ = await asyncio.wait(
                {connect, died}, timeout=timeout + 1, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            connect.cancel()
            await client.close()
            raise
        finally:
            died.cancel()
        if connect in done and connect.exception() is None:
            self._tools = client
            return
        connect.cancel()
        await asyncio.wait({connect})  # never swallows a cancellation of our own task
        await client.close()
        if died in done:
            raise SandboxStartError(
                f"sandbox {self.id} exited with status {self._proc.returncode} before its "
                f"action server was ready: {self.log_tail() or '(no output)'}"
            )
        exc = connect.exception() if connect.done() and not connect.cancelled() else None
        raise SandboxStartError(
            f"sandbox {self.id}: action server not ready within {timeout:.1f}s: "
            f"{exc or 'timed out'}; log: {self.log_tail() or '(no output)'}"
        ) from exc

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,  # noqa: ASYNC109 (contract: the caller's limit, enforced inside)
        input: bytes | None = None,
        cpu_limit_s: float | None = None,
    ) -> ExecResult:
        """See ``Sandbox.exec``."""
        if self.stopped:
            raise SandboxClosed(f"sandbox {self.id} is stopped")
        if not argv:
            raise ValueError("exec needs a non-empty argv")
        started = time.monotonic()
        meter = None if cpu_limit_s is None else self._cpu_meter()
        if cpu_limit_s is not None and meter is None:
            timeout = min(timeout, cpu_limit_s)  # nothing counts CPU time: wall-clock it is
        cpu = None if meter is None or cpu_limit_s is None else CpuLimit(meter, cpu_limit_s)
        try:
            with self.exec_command(argv, meter) as command:
                out, err, returncode = await self._run_exec(
                    command, input, limit_s=timeout, cpu=cpu
                )
            cpu_s = None if cpu is None else cpu.measure()
        finally:
            if meter is not None:
                self._release_meter(meter)
        usage = grading_usage.get() if cpu_limit_s is not None else None
        if usage is not None:
            usage.add(time.monotonic() - started, cpu_s)
        return ExecResult(
            exit_code=returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=returncode is None,
            duration_s=time.monotonic() - started,
            cpu_s=cpu_s,
        )

    _graded = 0
    """``exec`` calls with a CPU-time limit now running (the sandbox's CPU share is raised)."""

    def _cpu_meter(self) -> SandboxCgroup | None:
        """A fresh child cgroup for one CPU-limited exec, the sandbox's share raised while any
        runs; None without cgroups that count CPU time."""
        if self.cgroup is None:
            return None
        meter = self.cgroup.child(f"exec-{secrets.token_hex(4)}")
        if meter is not None:
            self._graded += 1
            with contextlib.suppress(OSError):
                self.cgroup.set_cpu_share(GRADING_CPU_SHARE)
        return meter

    def _release_meter(self, meter: SandboxCgroup) -> None:
        # A process the command left behind keeps it; the sandbox's teardown removes it then.
        meter.remove()
        self._graded -= 1
        if self._graded == 0 and self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.set_cpu_share(1)

    async def _run_exec(
        self,
        command: Sequence[str],
        input: bytes | None,
        *,
        limit_s: float,
        cpu: CpuLimit | None = None,
    ) -> tuple[bytes, bytes, int | None]:
        """Run the exec helper; its output and exit status (None: timed out and killed)."""
        try:
            proc = await spawn(
                *self._niced(command),
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.exec_env(),
                cwd=self.exec_cwd(),
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxStartError(f"sandbox {self.id}: cannot exec: {exc}") from exc
        try:
            async with asyncio.timeout(limit_s):  # not wait_for: it can swallow a cancel on 3.11
                talk = proc.communicate(input)
                out, err = await (talk if cpu is None else cpu.bound(talk))
        except TimeoutError:
            await self._kill_exec(proc)
            out, err = await asyncio.wait_for(proc.communicate(), 5)
            return out, err, None
        except BaseException:  # cancelled: never leave the helper or its child behind
            await asyncio.shield(self._kill_exec(proc))
            raise
        return out, err, proc.returncode

    async def _kill_exec(self, proc: asyncio.subprocess.Process) -> None:
        """Kill a timed-out exec from the inside out.

        The helper (nsenter, apptainer exec) must outlive its child long enough to reap it: a
        process that joined the sandbox's PID namespace and is orphaned goes to the host's
        init, and the namespace cannot finish dying until that init reaps it.
        """
        members = await asyncio.to_thread(procs.group_members, proc.pid)
        procs.kill([p for p in members if p != proc.pid])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
        procs.kill_led_group(proc)

    async def upload(self, path: str, data: bytes) -> None:
        await self.tools.upload(path, data)

    async def download(self, path: str) -> bytes:
        return await self.tools.download(path)

    async def stop_agent(self, *, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (contract)
        """See ``Sandbox.stop_agent``: the action server kills them and waits until all are gone."""
        if self.stopped:
            raise SandboxClosed(f"sandbox {self.id} is stopped")
        try:
            await self.tools.stop_agent(timeout=timeout)
        except ActionError as exc:
            raise SandboxError(
                f"sandbox {self.id}: could not stop the agent's processes: {exc}"
            ) from exc

    async def orphans_reaped(self) -> int | None:
        """See ``Sandbox.orphans_reaped``: the action server's count."""
        if self.stopped:
            raise SandboxClosed(f"sandbox {self.id} is stopped")
        try:
            return await self.tools.orphans_reaped()
        except ActionError as exc:
            raise SandboxError(
                f"sandbox {self.id}: could not read the orphan count: {exc}"
            ) from exc

    async def stop(self, *, grace_s: float = 2.0) -> None:
        """Idempotent; concurrent callers share one teardown, which survives their cancellation."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._teardown(grace_s))
        await asyncio.shield(self._stop_task)

    async def _teardown(self, grace_s: float) -> None:
        if self._tools is not None:
            if grace_s > 0:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._tools.shutdown(), min(grace_s, 1.0))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tools.close(), 1.0)
        await self._terminate_extra(grace_s)
        proc = self._proc
        if proc is not None:
            if proc.returncode is None and grace_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace_s)
            if proc.returncode is None:
                self._kill_inner()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 1.0)
            if proc.returncode is None:
                # Once reaped, its group id may be anyone's (another sandbox's launcher):
                # what is left of ours is then found by its markers below.
                procs.kill_led_group(proc)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
        survivors = await self.survivors()
        for _ in range(_VERIFY_ROUNDS):
            if not survivors:
                break
            procs.kill(survivors)
            await asyncio.sleep(0.05)
            survivors = await self.survivors()
        await self._release()
        if survivors:
            raise ContainmentError(self.id, survivors)

    async def survivors(self) -> list[int]:
        """Pids that still carry one of this sandbox's markers."""
        found = set(
            await self._scanner.find(
                self.id, pidns=self.pidns, cmdline_marker=self.cmdline_marker()
            )
        )
        if self.cgroup is not None:
            found.update(self.cgroup.pids())
        # The launcher itself is already reaped or is a zombie we own; ignore our own pid.
        found.discard(os.getpid())
        return sorted(found)

    async def _release(self) -> None:
        """Give back what the sandbox owned; the runtime's hook removes lease and directories."""
        if self.cgroup is not None and not self.cgroup.remove():
            log.warning("sandbox %s: cgroups %s not removable", self.id, self.cgroup.paths)
        if self.on_released is not None:
            await self.on_released(self)

    #: Set by the runtime that created the sandbox.
    on_released: Callable[[ProcessSandbox], Awaitable[None]] | None = None
