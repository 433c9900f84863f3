"""Tool round-trip latency: the action server over its Unix socket versus the usual alternatives.

Run from the repository root:  .venv/bin/python benchmarks/tools_latency.py [--n 500]

Measured side by side in one run, on one machine:
  * action server, bash ``true``        (pty bash behind the UDS server, through ActionClient)
  * action server, IPython ``x = x + 1`` (jupyter_client kernel behind the same server)
  * tmux: send-keys + capture-pane polling for a marker (skipped if tmux is not installed)
  * ``subprocess.run(["bash", "-c", "true"])`` per command
  * SWE-ReX LocalRuntime bash session (only if ``swe-rex`` is installed; never installed here)
It prints each figure next to its target. ``--strict`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime.action import ActionClient

TARGETS_MS = {
    ("bash", "median"): 1.0,
    ("bash", "p99"): 3.0,
    ("ipython", "median"): 6.0,
}


@dataclass
class Figure:
    name: str
    samples_s: list[float]
    target_key: str | None = None

    def quantile(self, q: float) -> float:
        ordered = sorted(self.samples_s)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1e3

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_s) * 1e3


def _verdict(value_ms: float, key: str | None, stat: str) -> tuple[str, bool]:
    target = TARGETS_MS.get((key or "", stat))
    if target is None:
        return "", True
    ok = value_ms <= target
    return f"(target <= {target:g} ms: {'ok' if ok else 'MISSED'})", ok


def report(figures: list[Figure], skipped: list[str], extras: list[str]) -> bool:
    all_ok = True
    print(f"{'what':<44} {'n':>5} {'median':>10} {'p99':>10}")
    for fig in figures:
        med, p99 = fig.median_ms, fig.quantile(0.99)
        med_note, ok1 = _verdict(med, fig.target_key, "median")
        p99_note, ok2 = _verdict(p99, fig.target_key, "p99")
        all_ok &= ok1 and ok2
        print(f"{fig.name:<44} {len(fig.samples_s):>5} {med:>8.3f}ms {p99:>8.3f}ms")
        for note in (
            f"median {med_note}" if med_note else "",
            f"p99 {p99_note}" if p99_note else "",
        ):
            if note:
                print(f"{'':<46}{note}")
    for line in skipped:
        print(f"{line}")
    for line in extras:
        print(line)
    return all_ok


async def timed(n: int, call: Callable[[], Awaitable[object]], warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def bench_action_server(n: int, base: Path) -> tuple[list[Figure], list[str]]:
    sock = base / "sock" / "action.sock"
    work = base / "work"
    work.mkdir()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentroll.runtime.action",
        "--socket",
        str(sock),
        "--workdir",
        str(work),
        start_new_session=True,
    )
    client = ActionClient(sock)
    try:
        await client.connect(30)
        ready_s = time.perf_counter() - started
        first_bash = time.perf_counter()
        await client.bash("true")
        first_bash_s = time.perf_counter() - first_bash
        bash = await timed(n, lambda: client.bash("true"))
        kernel_start = time.perf_counter()
        await client.python("x = 0")
        kernel_s = time.perf_counter() - kernel_start
        ipython = await timed(n, lambda: client.python("x = x + 1"))
        check = await client.python("x")
        assert check.output.strip() == str(n + 20), check
        await client.shutdown()
    finally:
        await client.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    extras = [
        f"action server start -> first `alive` answered: {ready_s * 1e3:.1f} ms "
        "(python start + imports + socket)",
        f"first bash call (shell warmed in background): {first_bash_s * 1e3:.2f} ms",
        f"first python call (lazy kernel start): {kernel_s * 1e3:.0f} ms",
    ]
    return [
        Figure("action server (UDS)  bash `true`", bash, "bash"),
        Figure("action server (UDS)  ipython `x = x + 1`", ipython, "ipython"),
    ], extras


def bench_tmux(n: int, base: Path) -> Figure | str:
    tmux = shutil.which("tmux")
    if tmux is None:
        return "tmux send-keys/capture-pane: skipped (tmux is not installed)"
    sock = str(base / "tmux.sock")
    cmd = [tmux, "-S", sock]
    subprocess.run(
        [*cmd, "new-session", "-d", "-s", "bench", "-x", "200", "-y", "50", "bash --norc"],
        check=True,
        timeout=10,
        env={**os.environ, "PS1": ""},
    )
    try:

        def round_trip(i: int) -> None:
            # The marker is assembled by printf, so the echoed command line never matches it.
            subprocess.run(
                [*cmd, "send-keys", "-t", "bench", f"true; printf 'D%s\\n' {i}X", "Enter"],
                check=True,
                timeout=10,
            )
            marker = f"D{i}X"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pane = subprocess.run(
                    [*cmd, "capture-pane", "-p", "-t", "bench", "-S", "-5"],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=10,
                ).stdout
                if any(line.strip() == marker for line in pane.splitlines()):
                    return
            raise RuntimeError("tmux marker never appeared")

        for i in range(10):
            round_trip(i)
        samples = []
        for i in range(10, 10 + n):
            start = time.perf_counter()
            round_trip(i)
            samples.append(time.perf_counter() - start)
    finally:
        subprocess.run([*cmd, "kill-server"], timeout=10, check=False)
    return Figure("tmux send-keys + capture-pane  bash `true`", samples)


def bench_subprocess(n: int) -> Figure:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True, timeout=10)
        samples.append(time.perf_counter() - start)
    return Figure('subprocess.run(["bash","-c","true"])', samples)


async def bench_swerex(n: int) -> Figure | str:
    try:
        from swerex.runtime.abstract import (  # type: ignore[import-not-found]
            BashAction,
            CloseBashSessionRequest,
            CreateBashSessionRequest,
        )
        from swerex.runtime.local import LocalRuntime  # type: ignore[import-not-found]
    except ImportError:
        return "SWE-ReX LocalRuntime: skipped (swe-rex is not installed)"
    runtime = LocalRuntime()
    await runtime.create_session(CreateBashSessionRequest())
    try:
        samples = await timed(n, lambda: runtime.run_in_session(BashAction(command="true")))
    finally:
        await runtime.close_session(CloseBashSessionRequest())
    return Figure("SWE-ReX LocalRuntime session  bash `true`", samples)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="round trips per action-server figure")
    parser.add_argument("--tmux-n", type=int, default=200, help="round trips for tmux")
    parser.add_argument("--subprocess-n", type=int, default=300, help="subprocess.run calls")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    print(f"tools latency on {os.cpu_count()} CPUs, python {sys.version.split()[0]}\n")
    with tempfile.TemporaryDirectory(prefix="toolsbench-") as tmp:
        base = Path(tmp)
        figures, extras = await bench_action_server(args.n, base)
        skipped: list[str] = []
        for result in (
            await asyncio.to_thread(bench_tmux, args.tmux_n, base),
            await asyncio.to_thread(bench_subprocess, args.subprocess_n),
            await bench_swerex(args.n),
        ):
            if isinstance(result, Figure):
                figures.append(result)
            else:
                skipped.append(result)
    ok = report(figures, skipped, ["", *extras])
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
