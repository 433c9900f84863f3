"""verifiers worker processes (`worker.py`), long-lived, bounded in time and memory.

Why processes of their own: a verifiers environment's reward functions are task code, but
they read the policy's work, and the policy is an adversary. They run outside every sandbox
the policy's commands reach, in an interpreter of the environment's own virtual environment
(`venv`), never in the server's, confined in a bubblewrap sandbox of its own without network
(`confine`) and, where the server can make one, a cgroup of its own (`MAX_PROCESSES`, the
memory limit in all): a reward function that runs the reply reaches nothing of the host's,
and one that hangs on an answer, eats memory or crashes takes down one worker, never the event
loop. The mechanics are the math grading pool's (`grading_pool`: a worker is exec'd afresh in
isolated mode, in its own session, dies with the server, is killed by its pid when it
overruns and reaped before its slot is free); here each interpreter (one per environment
venv) has up to `size` workers for episodes and `size` more for everything else (task
listing, tool schemas and calls, scoring, controls), started on demand (verifiers imports in
seconds) and kept while there is work. An episode holds its worker while the policy samples,
so it never takes a slot scoring or a tool call waits for; and no request waits for a slot
longer than its own timeout: past it, `InfraError` `verifiers_workers_busy` (the server's
load, never the policy's doing).

`ask()` returns the worker's reply, or raises `VerifiersWorkerFailure` of kind `timeout` (the
request ran past its deadline: the worker is killed), `crashed` (the worker died
mid-request) or `unavailable` (it could not start). Whose fault each is, the handler decides
(`handler.py`).
"""

import asyncio
import contextlib
import os
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.grading_pool import REAP_TIMEOUT_S, _Worker, _WorkerGone
from agentroll.handlers.builtin.verifiers_env.confine import confined_argv
from agentroll.handlers.errors import InfraError, Unconfinable, VerifiersWorkerFailure
from agentroll.handlers.loop_local import LoopLocal
from agentroll.runtime.base import Limits
from agentroll.runtime.cgroup import SandboxCgroup

WORKER_SCRIPT = str(Path(__file__).with_name("worker.py"))
DEFAULT_SIZE = max(1, min(4, os.cpu_count() or 1))
DEFAULT_MEMORY_LIMIT_BYTES = 4 << 30
DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 256 << 20
"""One reply line at most (a task listing of a large taskset is one line)."""

MAX_PROCESSES = 256
"""Processes and threads in one worker's sandbox (its cgroup's `pids.max`, where the server
can create cgroups): code a reward function runs cannot fork-bomb the node."""
CGROUP_REMOVE_TRIES = 10

FORK_FRIENDLY_ENV = {"PYTHONMALLOC": "malloc", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
"""The worker's memory in transparent huge pages, where the kernel offers them on request
(THP `madvise`): each request the policy's text reaches is answered by a child forked from the
worker (`worker.in_child`), and a fork copies one page-table entry per page of the worker's
~200 MB heap (what verifiers imports), then tears them down at the child's exit: 4-5 ms each
way in 4 KiB pages on a VM, a fifth of that in 2 MiB ones. Python's objects go to glibc's
malloc (`PYTHONMALLOC`), whose heap asks for huge pages (`glibc.malloc.hugetlb=1`); the
kernel still copies a child's writes 4 KiB at a time."""

INTERPRETER_FLAGS = ["-s", "-P"]
"""`python -I` less `-E`, which would drop `FORK_FRIENDLY_ENV`: no user site-packages, not
the script's folder on the import path (`grader_launch`); no other `PYTHON*` variable reaches
the worker either, as its sandbox starts from an empty environment (`confine`)."""


Turns = Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]]
"""Answers a worker's turn (the messages it adds) with the policy's `{"reply": text}`, or
`{"end": why}` once the rollout's limits end the exchange."""


class VerifiersWorkers:
    """Up to `size` workers per environment interpreter; `ask()` sends one request."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        *,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        self.size = size
        self.memory_limit_bytes = memory_limit_bytes
        self.start_timeout_s = start_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._slots: dict[Path, asyncio.Semaphore] = {}
        self._episode_slots: dict[Path, asyncio.Semaphore] = {}
        self._idle: defaultdict[Path, list[_Worker]] = defaultdict(list)
        self._workers: set[_Worker] = set()
        self._reaping: set[asyncio.Task[int]] = set()
        self._cgroups: dict[_Worker, SandboxCgroup] = {}
        self._closed = False

    @property
    def worker_pids(self) -> list[int]:
        return sorted(w.process.pid for w in self._workers)

    async def ask(
        self,
        python: Path,
        message: dict[str, Any],
        timeout_s: float,
        answer: Turns | None = None,
        *,
        answer_waits: bool = True,
    ) -> dict[str, Any]:
        """The reply of a worker of `python` to `message`, within `timeout_s` (the start of a
        worker not counted: an environment's import time is not the request's doing). With
        `answer`, each `{"turn": ...}` line the worker sends first is answered with
        `await answer(turn)`; `timeout_s` then bounds each wait for the worker, not them.
        `answer_waits`: False where `answer` answers at once (a control's empty replies)."""
        # An episode holds its worker while the policy samples; it waits on episodes only,
        # so tools, scoring and controls always have slots of their own.
        episode = answer is not None and answer_waits
        pool = self._episode_slots if episode else self._slots
        slots = pool.setdefault(python, asyncio.Semaphore(self.size))
        async with _slot(slots, timeout_s):
            self._check_open()
            worker = await self._checkout(python)
            try:
                reply = await _exchange(worker, message, timeout_s)
                while answer is not None and "turn" in reply:
                    reply = await _exchange(worker, await answer(reply["turn"]), timeout_s)
            except _Overran:
                await self._retire(worker)
                self._check_open()
                raise VerifiersWorkerFailure(
                    "timeout", f"no answer within {timeout_s:g} s"
                ) from None
            except _WorkerGone:
                await self._retire(worker)
                self._check_open()
                code = worker.process.returncode
                raise VerifiersWorkerFailure(
                    "crashed", f"the worker died (exit status {code})"
                ) from None
            except BaseException:  # cancelled mid-request: the worker's state is unknown
                self._discard(worker)
                raise
            if reply.get("retire"):
                await self._retire(worker)
            else:
                self._park(python, worker)
            return reply

    async def shutdown(self) -> None:
        """Kill and reap every worker; later requests fail as `unavailable`."""
        self._closed = True
        for worker in list(self._workers):
            self._discard(worker)
        if self._reaping:
            await asyncio.wait(self._reaping, timeout=REAP_TIMEOUT_S)

    def _check_open(self) -> None:
        if self._closed:
            raise VerifiersWorkerFailure("unavailable", "the verifiers workers are shut down")

    async def _checkout(self, python: Path) -> _Worker:
        idle = self._idle[python]
        while idle:
            worker = idle.pop()
            if worker.process.returncode is None:
                return worker
            self._discard(worker)  # died while idle
        return await self._start(python)

    async def _start(self, python: Path) -> _Worker:
        # Its parent inside the sandbox is bubblewrap's init (PID 1), which dies with us.
        argv = [str(self.memory_limit_bytes), "1"]
        limits = Limits(max_processes=MAX_PROCESSES, max_total_memory_bytes=self.memory_limit_bytes)
        cgroup = SandboxCgroup.create(f"verifiers-{uuid.uuid4().hex[:12]}", limits)
        try:
            confined = worker_argv(python, argv)
            process = await asyncio.create_subprocess_exec(
                *in_cgroup(cgroup, confined),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=MAX_REPLY_BYTES,
            )
        except (Unconfinable, OSError) as exc:
            if cgroup is not None:
                cgroup.remove()
            raise VerifiersWorkerFailure(
                "unavailable", f"cannot start a verifiers worker: {exc}"
            ) from exc
        except BaseException:  # cancelled mid-start: asyncio kills the child, its cgroup goes
            if cgroup is not None:
                _remove_later(cgroup, CGROUP_REMOVE_TRIES)
            raise
        worker = _Worker(process)
        self._workers.add(worker)
        if cgroup is not None:
            self._cgroups[worker] = cgroup
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await worker.receive()  # {"ready": true, ...}
        except (TimeoutError, _WorkerGone) as exc:
            await self._retire(worker)
            problem = "was not ready in time" if isinstance(exc, TimeoutError) else "exited"
            raise VerifiersWorkerFailure(
                "unavailable", f"a verifiers worker {problem} (its stderr is in the server log)"
            ) from exc
        except BaseException:
            self._discard(worker)
            raise
        return worker

    def _park(self, python: Path, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        worker.idle_since = loop.time()
        self._idle[python].append(worker)
        loop.call_later(self.idle_timeout_s, self._exit_if_idle, python, worker, worker.idle_since)

    def _exit_if_idle(self, python: Path, worker: _Worker, idle_since: float) -> None:
        if worker in self._idle[python] and worker.idle_since == idle_since:
            self._idle[python].remove(worker)
            self._discard(worker)

    def _discard(self, worker: _Worker) -> "asyncio.Task[int]":
        self._workers.discard(worker)
        worker.kill()
        reaping = asyncio.ensure_future(worker.process.wait())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)
        cgroup = self._cgroups.pop(worker, None)
        if cgroup is not None:
            reaping.add_done_callback(lambda _: _remove_later(cgroup, CGROUP_REMOVE_TRIES))
        return reaping

    async def _retire(self, worker: _Worker) -> None:
        await asyncio.wait({self._discard(worker)}, timeout=REAP_TIMEOUT_S)


@contextlib.asynccontextmanager
async def _slot(slots: asyncio.Semaphore, timeout_s: float) -> AsyncIterator[None]:
    """One of `slots`, waited for no longer than the request's own `timeout_s`: a request
    that cannot get a worker in time is the server's load, never the policy's doing."""
    try:
        async with asyncio.timeout(timeout_s):
            await slots.acquire()
    except TimeoutError:
        raise InfraError(
            f"every verifiers worker stayed busy for {timeout_s:g} s",
            cause="verifiers_workers_busy",
        ) from None
    try:
        yield
    finally:
        slots.release()


class _Overran(Exception):
    """The worker did not answer in time (not a timeout of a turn's answer)."""


async def _exchange(worker: _Worker, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    try:
        async with asyncio.timeout(timeout_s):
            await worker.send(message)
            return await worker.receive()
    except TimeoutError:
        raise _Overran from None


def load_failure(reply: dict[str, Any]) -> InfraError:
    """A worker's `{"ok": false, "stage": "load"}`: the environment, not the policy."""
    return InfraError(
        f"the verifiers environment cannot load: {reply.get('error')}"[:4000],
        cause="verifiers_load_failed",
    )


def worker_argv(python: Path, args: list[str]) -> list[str]:
    """A worker of `python`, confined, started with `args` (its memory limit, its parent)."""
    command = [str(python), *INTERPRETER_FLAGS, WORKER_SCRIPT, *args]
    return confined_argv(python, command, Path(WORKER_SCRIPT).parent.parent, FORK_FRIENDLY_ENV)


def in_cgroup(cgroup: SandboxCgroup | None, argv: list[str]) -> list[str]:
    """`argv` started by a shell that first moves itself into `cgroup` (each hierarchy's
    `cgroup.procs`), so bubblewrap and everything under it are counted from the start."""
    if cgroup is None:
        return argv
    join = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 111; shift; done; shift; exec "$@"'
    files = [str(f) for f in cgroup.procs_files()]
    return ["/bin/sh", "-c", join, "sh", *files, "--", *argv]


def _remove_later(cgroup: SandboxCgroup, tries: int) -> None:
    """Remove a dead worker's cgroup; its sandbox's last processes may take a moment to go."""
    if cgroup.remove() or tries <= 1:
        return
    asyncio.get_running_loop().call_later(0.5, _remove_later, cgroup, tries - 1)


_default: LoopLocal[VerifiersWorkers] = LoopLocal(VerifiersWorkers)


def default_workers() -> VerifiersWorkers:
    """The running event loop's workers, started on first use."""
    return _default.get()


async def asked(
    python: Path,
    message: dict[str, Any],
    timeout_s: float,
    answer: Turns | None = None,
    *,
    answer_waits: bool = True,
) -> dict[str, Any]:
    """`default_workers().ask(...)`; a worker that cannot start is infra_error
    `verifiers_worker_unavailable` (never the request's doing), any other failure raised."""
    try:
        return await default_workers().ask(
            python, message, timeout_s, answer, answer_waits=answer_waits
        )
    except VerifiersWorkerFailure as exc:
        if exc.kind == "unavailable":
            raise InfraError(str(exc), cause="verifiers_worker_unavailable") from exc
        raise


async def shutdown_default_workers() -> None:
    workers = _default.pop()
    if workers is not None:
        await workers.shutdown()
