"""CPU classes: a warm python tool call beside other sandboxes' CPU-bound work.

A sandbox serving RUN gets the interactive CPU share; sandboxes starting (INIT) or being graded
(EVAL) get the batch share (`agentroll.runtime.cgroup`). This measures what that buys a tool
call: an action server whose kernel is confined to a sandbox cgroup of the interactive class
answers `python` calls while `--hogs` CPU-bound processes, each in a sandbox cgroup of its own,
keep every core busy: first with the hogs in the interactive class too (RUN beside RUN), then
with them in the batch class (RUN beside INIT/EVAL work). Target: beside batch work a call
costs at most twice what it costs on an idle node.

Needs a writable ``cpu`` cgroup (a root server); says so and exits otherwise.

    .venv/bin/python benchmarks/cpu_classes.py [--hogs 16] [--calls 60]
"""

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from _common import report

from agentroll.runtime import Limits
from agentroll.runtime.action import ActionClient
from agentroll.runtime.cgroup import SandboxCgroup
from agentroll.runtime.launch import action_server_argv

CELL = "print(sum(range(1, 21)))"


@contextlib.contextmanager
def hogs(count: int, *, interactive: bool) -> Iterator[None]:
    """`count` busy loops, each in a sandbox cgroup of its own of the given class."""
    started: list[tuple[subprocess.Popen[bytes], SandboxCgroup]] = []
    try:
        for i in range(count):
            cgroup = SandboxCgroup.create(f"bench-hog-{os.getpid()}-{i}", Limits())
            assert cgroup is not None
            cgroup.set_cpu_class(interactive=interactive)
            proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for procs in cgroup.procs_files():
                procs.write_text(str(proc.pid))
            started.append((proc, cgroup))
        time.sleep(1.0)  # every core busy before the first call
        yield
    finally:
        for proc, cgroup in started:
            proc.kill()
            proc.wait()
            cgroup.remove()


async def calls(client: ActionClient, n: int) -> list[float]:
    took = []
    for _ in range(n):
        began = time.perf_counter()
        result = await client.python(CELL)
        took.append(1000 * (time.perf_counter() - began))
        assert result.output == "210\n", result
        await asyncio.sleep(0.05)  # a tool call comes between LLM turns, not back to back
    return took


async def main(n_hogs: int, n_calls: int) -> int:
    if "cpu" not in SandboxCgroup.controllers():
        print("no writable cpu cgroup here (run as root, or delegate the cpu controller)")
        return 0
    cgroup = SandboxCgroup.create(f"bench-tool-{os.getpid()}", Limits())
    assert cgroup is not None
    cgroup.set_cpu_class(interactive=True)  # the sandbox serving RUN
    fds = cgroup.open_procs()
    with tempfile.TemporaryDirectory(prefix="agentroll-cpu-classes-") as tmp:
        sock, work = Path(tmp) / "sock" / "action.sock", Path(tmp) / "work"
        work.mkdir()
        argv = action_server_argv(sys.executable, str(work), Limits(), fds, socket=str(sock))
        server = await asyncio.create_subprocess_exec(*argv, pass_fds=fds, start_new_session=True)
        for fd in fds:
            os.close(fd)
        client = ActionClient(sock)
        try:
            await client.connect(60)
            await client.warm(["python"])
            idle = statistics.median(await calls(client, n_calls))
            with hogs(n_hogs, interactive=True):
                beside_run = statistics.median(await calls(client, n_calls))
            with hogs(n_hogs, interactive=False):
                beside_batch = statistics.median(await calls(client, n_calls))
            await client.shutdown()
        finally:
            await client.close()
            await asyncio.wait_for(server.wait(), 30)
            cgroup.remove()
    print(f"warm python call, median of {n_calls}; {n_hogs} CPU-bound sandboxes beside it:")
    report("idle node", idle, "ms", "-", True)
    report("beside RUN-class work", beside_run, "ms", "-", True)
    ok = beside_batch <= 2 * idle
    report("beside INIT/EVAL-class work", beside_batch, "ms", f"<= {2 * idle:.1f} ms", ok)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=16, help="CPU-bound sandboxes beside it")
    parser.add_argument("--calls", type=int, default=60, help="python calls per condition")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.hogs, args.calls)))
