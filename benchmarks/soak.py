"""Sustained load: does agentroll lose, leak or drift over a long run?

A mixed workload (code, swe, math and stem with tools; scripted tool-using policies) kept at
`--concurrency` rollouts in flight (default 256) in bubblewrap sandboxes, for `--duration-s`
(default 30 min), while the trainer side misbehaves the way real ones do:
- every `--pause-every-s` a weight-sync barrier: pause (alternately `wait` and `abort`),
  hold it, resume with the next policy version;
- every `--churn-every-s` backend churn: one rotating backend is drained (or deleted) and
  another registered in its place; one backend stays registered throughout.
The client (this process), the agentroll server and three scripted vLLM backends are separate
processes. Sampled over time: throughput, server RSS, open fds and threads, live sandboxes.
At the end the feeder stops, the run drains, and we check what the targets are about:

    zero lost results    every submitted job comes back through the cursor exactly once
    zero leaked          no sandbox process, lease, or server child process left once idle;
                         the server's fd count back at its idle baseline
    RSS growth <= 5 %    server RSS at the end vs. just after warm-up
    no p99 drift         stage-latency p99 of the last window vs. the first after warm-up

    .venv/bin/python benchmarks/soak.py [--duration-s 1800] [--concurrency 256]

`run_soak(SoakConfig(...))` is the same run as a function (the CI test runs a short one).
"""

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from soak_figures import FAMILIES, Sample, SoakConfig, SoakReport, print_report

from agentroll.server.launch import Proc, agentroll_process
from agentroll.server.schema import Trajectory
from agentroll.trainer_clients import AsyncRolloutClient, ServerUnavailable

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
T = TypeVar("T")


async def _again(call: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """Retry a call the server never answered (e.g. a keep-alive connection it had just
    closed). Only for idempotent calls: submissions are, by job id; reads are."""
    for attempt in range(attempts):
        try:
            return await call()
        except ServerUnavailable:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


# -- the workload ---------------------------------------------------------------------------
def _tasks() -> dict[str, Sequence[Any]]:
    from agentroll.handlers.builtin.code import load_code_tasks
    from agentroll.handlers.builtin.math import load_math_tasks
    from agentroll.handlers.builtin.stem import load_stem_tasks
    from agentroll.handlers.builtin.swe import load_swe_tasks

    return {
        "code": load_code_tasks(),
        "swe": load_swe_tasks(),
        "math": load_math_tasks(),
        "stem": load_stem_tasks(),
    }


def _job(tasks: dict[str, Sequence[Any]], i: int, families: tuple[str, ...]) -> dict[str, Any]:
    family = families[i % len(families)]
    pool, k = tasks[family], i // len(families)
    if family == "swe":
        instance = pool[k % len(pool)].instance
    elif family == "code":
        instance = pool[k % len(pool)].instance()
    else:
        instance = pool[k % len(pool)].instance(tools=True)
    return {
        "job_id": f"soak-{i:07d}",
        "handler": family,
        "instance": instance,
        "sampling": {"seed": i, "max_tokens": 1024},
    }


# -- process readings -----------------------------------------------------------------------
def _rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE / 2**20


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _backend_conns(pid: int, ports: set[int]) -> int:
    """Open TCP connections of `pid` to the backends' ports: its pooled keep-alive
    connections, bounded by the peak concurrency per backend; not a leak."""
    remote: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                cols = line.split()
                remote[cols[9]] = int(cols[2].rsplit(":", 1)[1], 16)
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and remote.get(target[8:-1]) in ports:
                count += 1
    return count


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (zombies included: an unreaped child is a leak too)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        frontier += kids
    return found


def _sandbox_procs(ids: set[str]) -> set[int]:
    """Live processes of the sandboxes named in `ids` (this run's; others may share the host)."""
    from agentroll.runtime import procs

    return {p.pid for p in procs.scan() if p.sandbox_id in ids}


# -- the driver -----------------------------------------------------------------------------
class _Run:
    def __init__(
        self, cfg: SoakConfig, server: Proc, backends: list[Proc], state_dir: Path
    ) -> None:
        self.cfg = cfg
        self.server = server
        self.backends = backends
        self.state_dir = state_dir
        self.report = SoakReport()
        self.tasks = _tasks()
        self.client = AsyncRolloutClient(server.url, token=server.token, timeout_s=120)
        bearer = {"authorization": f"Bearer {server.token}"}
        self.http = httpx.AsyncClient(base_url=server.url, headers=bearer, timeout=120)
        self.pending: set[str] = set()
        self.seen: set[str] = set()
        self.next_index = 0
        self.feeding = True
        self.started = time.monotonic()
        self.space = asyncio.Event()
        self.died = asyncio.Event()
        self.sandbox_ids: set[str] = set()
        self.backend_ports = {int(b.url.rsplit(":", 1)[1]) for b in backends}

    def other_fds(self) -> int:
        """Open fds of the server other than pooled connections to backends."""
        pid = self.server.pid
        return _fds(pid) - _backend_conns(pid, self.backend_ports)

    def now(self) -> float:
        return time.monotonic() - self.started

    async def feed(self) -> None:
        """Keep `concurrency` rollouts in flight until the feeder is stopped."""
        while self.feeding:
            room = self.cfg.concurrency - len(self.pending)
            if room > 0:
                families = self.cfg.families
                batch = [_job(self.tasks, self.next_index + k, families) for k in range(room)]
                self.next_index += room
                self.pending.update(j["job_id"] for j in batch)
                await _again(partial(self.client.submit, batch))
                self.report.submitted += len(batch)
            self.space.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.space.wait(), 1.0)

    async def follow(self, stop: asyncio.Event) -> None:
        """The trainer's pull loop: every result once, through the durable cursor."""
        cursor = 0
        while not (stop.is_set() and not self.pending):
            page = await _again(partial(self.client.results, after=cursor, limit=1000, wait=1.0))
            for t in page.results:
                self._take(t)
            cursor = page.next_cursor
            if page.results:
                self.space.set()

    def _take(self, t: Trajectory) -> None:
        r = self.report
        if t.job_id in self.seen:
            r.duplicates += 1
            return
        self.seen.add(t.job_id)
        self.pending.discard(t.job_id)
        r.received += 1
        r.outcomes[t.outcome.value] += 1
        if t.error is not None:
            r.error_types[t.error.type] += 1
        if t.outcome.value == "infra_error" and t.reward is not None:
            r.infra_with_reward += 1
        r.finished_at.append((self.now(), t))

    async def sample(self, stop: asyncio.Event) -> None:
        pid = self.server.pid
        leases = self.state_dir / "leases"
        while not stop.is_set():
            code = self.server.popen.poll()
            if code is not None:  # the server crashed: stop, report what there is
                self.report.server_died_at_s = self.now()
                self.report.server_exit_code = code
                self.died.set()
                return
            self.report.samples.append(
                Sample(
                    t=self.now(),
                    finished=self.report.received,
                    rss_mb=_rss_mb(pid),
                    fds=_fds(pid),
                    threads=_threads(pid),
                    sandboxes=self._count_leases(leases),
                    in_flight=len(self.pending),
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.cfg.sample_every_s)

    def _count_leases(self, leases: Path) -> int:
        names = [p.stem for p in leases.iterdir()] if leases.exists() else []
        self.sandbox_ids.update(names)
        return len(names)

    async def pause_cycles(self, stop: asyncio.Event) -> None:
        version = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.cfg.pause_every_s)
                return
            mode: Literal["wait", "abort"] = "wait" if version % 2 == 0 else "abort"
            await self.client.pause(mode=mode, timeout_s=120)
            await asyncio.sleep(self.cfg.pause_hold_s)
            version += 1
            await self.client.resume(policy_version=version)
            self.report.pauses += 1

    async def churn(self, stop: asyncio.Event) -> None:
        """b0 stays; b1 and b2 take turns: the registered one is drained (or deleted)."""
        rotating = {"b1": self.backends[1], "b2": self.backends[2]}
        current = "b1"
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.cfg.churn_every_s)
                return
            other = "b2" if current == "b1" else "b1"
            if other in {b.id for b in await _again(self.client.backends)}:
                continue  # the last drain has not finished yet
            await self.client.add_backend({"id": other, "base_url": rotating[other].url})
            if self.report.churns % 2 == 0:
                r = await self.http.post(f"/v1/backends/{current}/drain")
                r.raise_for_status()
            else:
                await self.client.remove_backend(current)
            current = other
            self.report.churns += 1

    async def drive(self) -> SoakReport:
        cfg = self.cfg
        await self.client.add_backend({"id": "b0", "base_url": self.backends[0].url})
        await self.client.add_backend({"id": "b1", "base_url": self.backends[1].url})
        self.report.idle_fds_before = self.other_fds()
        stop_side, stop_follow = asyncio.Event(), asyncio.Event()
        side = [
            asyncio.create_task(self.sample(stop_side)),
            asyncio.create_task(self.pause_cycles(stop_side)),
            asyncio.create_task(self.churn(stop_side)),
        ]
        follower = asyncio.create_task(self.follow(stop_follow))
        feeder = asyncio.create_task(self.feed())
        self.report.warmup_end_s = cfg.duration_s * cfg.warmup_fraction
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.died.wait(), cfg.duration_s)
            if self.died.is_set():
                self.report.lost = sorted(self.pending)
                self.report.elapsed_s = self.now()
                return self.report
            self.feeding = False
            await asyncio.wait_for(feeder, 60)
            stop_side.set()
            await asyncio.wait_for(asyncio.gather(*side), 180)  # a pause in progress ends
            stop_follow.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(follower), cfg.drain_timeout_s)
            self.report.lost = sorted(self.pending)
            self.report.elapsed_s = self.now()
            await self._idle_checks()
        finally:
            for task in (*side, follower, feeder):
                task.cancel()
            await asyncio.gather(*side, follower, feeder, return_exceptions=True)
            await self.client.close()
            await self.http.aclose()
        return self.report

    async def _idle_checks(self, settle_s: float = 30.0) -> None:
        """Once idle, sandboxes go (torn down in the background) and fds settle."""
        r = self.report
        leases = self.state_dir / "leases"
        give_up = time.monotonic() + settle_s
        while True:
            r.idle_fds_after = self.other_fds()
            r.idle_backend_conns = _backend_conns(self.server.pid, self.backend_ports)
            r.leaked_children = _children(self.server.pid)
            self._count_leases(leases)
            r.leaked_sandbox_procs = sorted(_sandbox_procs(self.sandbox_ids))
            r.leftover_leases = sorted(p.name for p in leases.iterdir()) if leases.exists() else []
            clean = not (r.leaked_children or r.leaked_sandbox_procs or r.leftover_leases)
            if (clean and r.idle_fds_after <= r.idle_fds_before) or time.monotonic() > give_up:
                return
            await asyncio.sleep(0.5)


def run_soak(cfg: SoakConfig) -> SoakReport:
    """Start the backends and the server, run the workload, stop the server (SIGTERM)."""
    with contextlib.ExitStack() as stack:
        work = cfg.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        state_dir = work / "sandboxes"
        llm_argv = [
            "scripted-llm", "--port", "0", "--policy", "echo,swe,code,stem,math",
            "--wrong-rate", "0.3", "--latency-s", str(cfg.latency_s),
            "--max-model-len", "32768",
        ]  # fmt: skip
        backends = [
            stack.enter_context(agentroll_process([*llm_argv, "--seed", str(i)], work, f"llm{i}"))
            for i in range(3)
        ]
        env = {
            "AGENTROLL_POOLS__INIT": "32",
            "AGENTROLL_POOLS__RUN": str(cfg.concurrency),
            "AGENTROLL_POOLS__EVAL": "32",
            "AGENTROLL_POOLS__READY_BUFFER": "64",
            "AGENTROLL_LOG_LEVEL": "warning",
            "AGENTROLL_HEALTH_INTERVAL_S": "1",
            "AGENTROLL_SANDBOX": json.dumps({"type": "bwrap", "state_dir": str(state_dir)}),
        }
        server = stack.enter_context(
            agentroll_process(
                ["serve", "--port", "0", "--db", str(work / "soak.db")],
                work,
                "server",
                start_timeout_s=60.0,
                env=env,
            )
        )
        run = _Run(cfg, server, backends, state_dir)
        report = asyncio.run(run.drive())
        if report.server_died_at_s is not None:
            return report
        server.kill(15, timeout_s=120)  # SIGTERM: graceful shutdown of an idle server
        report.server_exit_code = server.popen.returncode
        if report.leaked_sandbox_procs:  # a second look after the server's own teardown
            report.leaked_sandbox_procs = sorted(_sandbox_procs(run.sandbox_ids))
        sb = state_dir / "sb"
        report.leftover_sandbox_dirs = sorted(p.name for p in sb.iterdir()) if sb.exists() else []
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-s", type=float, default=0.3)
    parser.add_argument("--pause-every-s", type=float, default=60.0)
    parser.add_argument("--churn-every-s", type=float, default=45.0)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--families", default=",".join(FAMILIES), help="handlers, in turn")
    parser.add_argument("--workdir", type=Path, help="keep logs and the database here")
    args = parser.parse_args()
    cfg = SoakConfig(
        duration_s=args.duration_s,
        concurrency=args.concurrency,
        latency_s=args.latency_s,
        pause_every_s=args.pause_every_s,
        churn_every_s=args.churn_every_s,
        windows=args.windows,
        families=tuple(args.families.split(",")),
        workdir=args.workdir,
    )
    if cfg.workdir is not None:
        cfg.workdir.mkdir(parents=True, exist_ok=True)
    print_report(cfg, run_soak(cfg))


if __name__ == "__main__":
    main()
