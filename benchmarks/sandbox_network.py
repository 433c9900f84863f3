"""Networked sandboxes: what their own namespace and NAT cost, beside the old --share-net.

    sudo .venv/bin/python benchmarks/sandbox_network.py [--samples 10] [--mib 256] [--concurrent 50]

* start-up: start request -> action server ready, median, for a sandbox without network, one
  sharing the server's network (``--share-net``, how sandboxes with network used to start)
  and one behind slirp4netns (target: the NAT adds <= 50 ms to a start)
* throughput: MiB/s of one TCP stream from "the internet" (agentroll.testing.netlab: two
  network namespaces this program makes; root only, nothing leaves the machine) to a client
  on the node's network (what --share-net gave) and to one inside a sandbox behind slirp4netns
  (target: >= 119 MiB/s, 1 Gbit/s: more than one sandbox's share of a node's uplink)
* concurrency: ``--concurrent`` sandboxes with network started and stopped at once (target: no
  errors, no slirp4netns left)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentroll.runtime import SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime, BwrapSandbox
from agentroll.runtime.config import BwrapConfig, SandboxNetworkConfig
from agentroll.testing.netlab import PUBLIC_ADDR, NetLab

CLIENT = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
t = time.perf_counter(); s.sendall(sys.argv[3].encode() + b"\\n"); n = 0
while chunk := s.recv(1 << 20):
    n += len(chunk)
print(n / (1 << 20) / (time.perf_counter() - t))
"""


class ShareNetRuntime(BwrapRuntime):
    """The old behaviour, for comparison only: bwrap --share-net, the server's own network."""

    def _network_files(self, sb: BwrapSandbox) -> None:
        return None


def report(name: str, value: str, target: str, ok: bool | None) -> None:
    verdict = "" if ok is None else ("OK" if ok else "MISSED")
    print(f"{name:<46} {value:>14}   target {target:<12} {verdict}")


async def start_ms(rt: BwrapRuntime, spec: SandboxSpec, n: int) -> float:
    times = []
    for _ in range(n + 2):  # the first two warm the page cache, not counted
        t = time.perf_counter()
        sb = await rt.start(spec, timeout=60)
        times.append(time.perf_counter() - t)
        await sb.stop()
    return statistics.median(times[2:]) * 1000


async def sandbox_mib_s(rt: BwrapRuntime, lab: NetLab, mib: int, runs: int) -> float:
    sb = await rt.start(SandboxSpec(network=True), timeout=60)
    try:
        rates = []
        for _ in range(runs):
            out = await sb.exec(
                ["python3", "-c", CLIENT, PUBLIC_ADDR, str(lab.port + 1), str(mib)], timeout=300
            )
            rates.append(float(out.stdout))
        return statistics.median(rates)
    finally:
        await sb.stop()


async def concurrent(rt: BwrapRuntime, n: int) -> tuple[int, int, float]:
    """Start and stop ``n`` sandboxes with network at once: errors, and NATs left behind."""
    t = time.perf_counter()
    started = await asyncio.gather(
        *(rt.start(SandboxSpec(network=True), timeout=300) for _ in range(n)),
        return_exceptions=True,
    )
    ok = [sb for sb in started if isinstance(sb, BwrapSandbox)]
    for err in {repr(e) for e in started if isinstance(e, BaseException)}:
        print("  start error:", err[:200])
    nats = [sb.nat.proc for sb in ok if sb.nat is not None]
    stopped = await asyncio.gather(*(sb.stop() for sb in ok), return_exceptions=True)
    errors = n - len(ok) + sum(isinstance(r, BaseException) for r in stopped)
    return errors, sum(p.returncode is None for p in nats), time.perf_counter() - t


def node_mib_s(lab: NetLab, mib: int, runs: int) -> float:
    argv = ["python3", "-c", CLIENT, PUBLIC_ADDR, str(lab.port + 1), str(mib)]
    return statistics.median(float(lab.run(lab.node, *argv)) for _ in range(runs))


async def main(samples: int, mib: int, n_concurrent: int) -> None:
    state = Path(tempfile.mkdtemp(prefix="ar-bench-", dir="/tmp"))
    lab = NetLab(state) if os.geteuid() == 0 else None
    try:
        config = BwrapConfig(state_dir=state)
        plain = config.build()
        shared = ShareNetRuntime(config)
        none = await start_ms(plain, SandboxSpec(), samples)
        share = await start_ms(shared, SandboxSpec(network=True), samples)
        nat = await start_ms(plain, SandboxSpec(network=True), samples)
        errors, left, took = await concurrent(plain, n_concurrent)
        await asyncio.gather(plain.close(), shared.close())
        print(f"start-up, median of {samples}")
        report("  no network", f"{none:8.1f} ms", "report", None)
        report("  --share-net (the node's network)", f"{share:8.1f} ms", "report", None)
        report("  own namespace + slirp4netns", f"{nat:8.1f} ms", "report", None)
        report("  added by the NAT (vs --share-net)", f"{nat - share:8.1f} ms", "<= 50 ms",
               nat - share <= 50)  # fmt: skip
        print(f"{n_concurrent} sandboxes with network at once")
        report("  start or stop errors", str(errors), "0", errors == 0)
        report("  slirp4netns left running", str(left), "0", left == 0)
        report("  start+stop wall time", f"{took:8.1f} s", "report", None)
        if lab is None:
            print("throughput: skipped (the lab's namespaces need root)")
            return
        runs = 3
        lab_config = SandboxNetworkConfig(slirp4netns_path=str(lab.slirp4netns))
        behind = BwrapConfig(state_dir=state, network=lab_config).build()
        try:
            sandbox = await sandbox_mib_s(behind, lab, mib, runs)
        finally:
            await behind.close()
        node = node_mib_s(lab, mib, runs)
        print(f"throughput, one TCP stream of {mib} MiB, median of {runs}")
        report("  node's network (what --share-net gave)", f"{node:8.1f} MiB/s", "report", None)
        report("  sandbox behind slirp4netns", f"{sandbox:8.1f} MiB/s", ">= 119 MiB/s",
               sandbox >= 119)  # fmt: skip
    finally:
        if lab is not None:
            lab.close()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--concurrent", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.mib, args.concurrent))
