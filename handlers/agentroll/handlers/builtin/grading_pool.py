"""math-verify in a small pool of long-lived worker processes, bounded in time and memory.

Why processes: math-verify (sympy) evaluates what it parses, and a policy's `2^{2^{40}}`
holds the GIL for minutes; a thread cannot be stopped, so the event loop, every other
rollout and `/healthz` would stall with it. A process can be killed.

Why our own protocol (`grading_worker`, JSON lines over stdin/stdout) and not
`multiprocessing`: its `spawn` and `forkserver` contexts start helper processes (the fork
server, the resource tracker) that outlive any pool and that we do not own, and plain `fork`
is unsafe in a server with threads. A worker is the package's own `grading_worker.py`, run
by path in isolated mode (`grader_launch`: neither the server's working directory nor any
`PYTHON*` variable is on its import path) and started by asyncio's subprocess support, so it
is exec'd afresh, inherits no descriptor but its pipes and stderr (`close_fds`),
runs in its own session (a Ctrl-C meant for the server does not kill a grading), and is
ours from start to reaping.

Bounds:
- concurrency: at most `size` workers, started on demand and kept while there is work
  (the import is slow; one idle for `idle_timeout_s` exits); further requests queue in
  order, so a flood of pathological answers waits, it never spawns, and an honest answer
  behind it is graded late, never failed;
- time: every request has a hard deadline; a worker that overruns is killed (by its pid)
  and reaped before its slot is free again, and the next request starts a fresh one;
- memory: each worker caps its address space (RLIMIT_AS), so a huge expression ends in a
  MemoryError (math-verify then answers "not equal") or in that worker's death;
- lifetime: `shutdown()` kills and reaps every worker; a worker also dies with the server
  (PR_SET_PDEATHSIG; an idle one sees its stdin close).

Whose fault: a timeout or a crash while the *answer* is parsed or compared is the policy's
doing: reward 0 with `grading_timeout` / `grading_crashed`. The same while the gold answer
is parsed, a gold answer math-verify cannot parse, a worker that cannot start and a pool
that shuts down mid-request are not: `InfraError`.

The default pool (`default_pool()`) belongs to the running event loop; the server closes it
on shutdown with `shutdown_default_pool()`.
"""

import asyncio
import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentroll.handlers.builtin.grader_launch import isolated_script
from agentroll.handlers.errors import InfraError
from agentroll.handlers.loop_local import LoopLocal

log = logging.getLogger("agentroll.handlers.grading")

WORKER_SCRIPT = str(Path(__file__).with_name("grading_worker.py"))
DEFAULT_SIZE = max(1, min(4, os.cpu_count() or 1))
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 20.0
DEFAULT_MEMORY_LIMIT_BYTES = 1 << 30
REAP_TIMEOUT_S = 10.0
UNAVAILABLE = "grader_unavailable"
BAD_GOLD = "invalid_gold_answer"

Reason = Literal[
    "equal",
    "not_equal",
    "unparsable_answer",
    "answer_too_long",
    "grading_timeout",
    "grading_crashed",
]


@dataclass(frozen=True, slots=True)
class Grade:
    """A verdict on one answer and why (`reason` goes into the reward's info)."""

    equal: bool
    reason: Reason


class _WorkerGone(Exception):
    """The worker's pipe closed: it exited or was killed."""


class _Interrupted(Exception):
    """A request ended without a verdict (timeout or crash)."""

    def __init__(self, reason: Reason, gold_parsed: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.gold_parsed = gold_parsed


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.idle_since = 0.0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        try:
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _WorkerGone(str(exc)) from exc

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise _WorkerGone("the grading worker exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()


class GradingPool:
    """Up to `size` math-verify workers; `grade()` is math-verify's verdict, within bounds."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
        start_timeout_s: float = 60.0,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        if size < 1:
            raise ValueError(f"a grading pool needs at least one worker, not {size}")
        self.timeout_s = timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.start_timeout_s = start_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._slots = asyncio.Semaphore(size)
        self._workers: set[_Worker] = set()
        self._idle: list[_Worker] = []
        self._reaping: set[asyncio.Task[int]] = set()
        self._closed = False

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the live workers, idle or busy."""
        return sorted(w.process.pid for w in self._workers)

    async def grade(self, gold: str, predicted: str) -> Grade:
        """math-verify's verdict on `predicted` against `gold` (see the module docstring)."""
        self._check_open()
        # No deadline of our own on the queue: each request ahead holds a slot at most
        # `timeout_s`, and the caller's stage timeout bounds the wait. A queue of slow answers
        # (any rollout's) delays a grading, it never turns it into an infrastructure error.
        await self._slots.acquire()
        try:
            self._check_open()
            worker = await self._checkout()
            try:
                verdict = await self._ask(worker, gold, predicted)
            except _Interrupted as stop:
                await self._retire(worker)
                self._check_open()  # killed by shutdown, not by the answer
                if not stop.gold_parsed:  # a slow gold answer, or a worker killed from outside
                    raise InfraError(
                        f"{stop.reason} while math-verify parsed the gold answer {gold[:200]!r}",
                        cause=BAD_GOLD if stop.reason == "grading_timeout" else UNAVAILABLE,
                    ) from stop
                return Grade(False, stop.reason)
            except BaseException:  # cancelled mid-request: the worker's state is unknown
                self._discard(worker)
                raise
            if verdict is None:
                self._park(worker)
                raise InfraError(
                    f"math-verify cannot parse the gold answer {gold[:200]!r}", cause=BAD_GOLD
                )
            grade, retire = verdict
            if retire:
                await self._retire(worker)
            else:
                self._park(worker)
            return grade
        finally:
            self._slots.release()

    async def shutdown(self) -> None:
        """Kill and reap every worker; later `grade()` calls raise `InfraError`."""
        self._closed = True
        for worker in list(self._workers):
            self._discard(worker)
        if self._reaping:
            _, stuck = await asyncio.wait(self._reaping, timeout=REAP_TIMEOUT_S)
            if stuck:
                log.warning("%d grading workers were not reaped after SIGKILL", len(stuck))

    # -- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InfraError("the grading pool is shut down", cause=UNAVAILABLE)

    async def _checkout(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.returncode is None:
                return worker
            self._discard(worker)  # died while idle (killed from outside)
        return await self._start_worker()

    async def _start_worker(self) -> _Worker:
        try:
            argv = [str(self.memory_limit_bytes), str(os.getpid())]
            process = await asyncio.create_subprocess_exec(
                *isolated_script(sys.executable, WORKER_SCRIPT, argv),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise InfraError(f"cannot start a grading worker: {exc}", cause=UNAVAILABLE) from exc
        worker = _Worker(process)
        self._workers.add(worker)
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await worker.receive()  # {"ready": true}
        except (TimeoutError, _WorkerGone) as exc:
            await self._retire(worker)
            self._check_open()  # killed by shutdown while it started
            problem = "was not ready in time" if isinstance(exc, TimeoutError) else "exited"
            raise InfraError(
                f"a grading worker {problem} (its stderr is in the server log)", cause=UNAVAILABLE
            ) from exc
        except BaseException:
            self._discard(worker)
            raise
        return worker

    async def _ask(self, worker: _Worker, gold: str, predicted: str) -> tuple[Grade, bool] | None:
        """(grade, retire the worker), or None if math-verify cannot parse the gold answer."""
        gold_parsed = False
        try:
            async with asyncio.timeout(self.timeout_s):
                await worker.send({"gold": gold, "predicted": predicted})
                if not (await worker.receive())["gold_parsed"]:
                    return None
                gold_parsed = True
                reply = await worker.receive()
        except TimeoutError:
            raise _Interrupted("grading_timeout", gold_parsed) from None
        except _WorkerGone:
            raise _Interrupted("grading_crashed", gold_parsed) from None
        return Grade(bool(reply["equal"]), reply["reason"]), bool(reply["retire"])

    def _park(self, worker: _Worker) -> None:
        """Keep `worker` for the next request; it exits if none comes for `idle_timeout_s`."""
        loop = asyncio.get_running_loop()
        worker.idle_since = loop.time()
        self._idle.append(worker)
        loop.call_later(self.idle_timeout_s, self._exit_if_idle, worker, worker.idle_since)

    def _exit_if_idle(self, worker: _Worker, idle_since: float) -> None:
        if worker in self._idle and worker.idle_since == idle_since:  # not used since
            self._idle.remove(worker)
            self._discard(worker)

    def _discard(self, worker: _Worker) -> "asyncio.Task[int]":
        """Kill `worker` now; it is reaped in the background (shutdown waits for that)."""
        self._workers.discard(worker)
        worker.kill()
        reaping = asyncio.ensure_future(worker.process.wait())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)
        return reaping

    async def _retire(self, worker: _Worker) -> None:
        """Kill `worker` and wait until it is reaped, so that its slot never holds two."""
        await asyncio.wait({self._discard(worker)}, timeout=REAP_TIMEOUT_S)


_default_pools: LoopLocal[GradingPool] = LoopLocal(GradingPool)


def default_pool() -> GradingPool:
    """The running event loop's pool, started on first use."""
    return _default_pools.get()


async def shutdown_default_pool() -> None:
    """Kill the running loop's default pool; the next grading starts a fresh one."""
    pool = _default_pools.pop()
    if pool is not None:
        await pool.shutdown()
