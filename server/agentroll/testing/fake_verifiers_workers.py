"""`VerifiersWorkers` whose workers speak the worker's line protocol without an environment.

Real verifiers workers need an environment's venv and real episodes; these answer at once,
so tests can hold slots exactly as long as they choose:

* `{"op": "episode"}`: asks the policy one turn (`{"turn": [...]}`), then answers `{"ok": true}`
  once the policy's reply comes;
* `{"op": "hold", "started": PATH, "release": PATH}`: creates `started`, then answers
  `{"ok": true}` once `release` exists (a request that keeps its worker busy);
* anything else: `{"ok": true}` at once.

Only how a worker is started differs from the real class: slots, checkout, parking and
reaping are `VerifiersWorkers`' own.
"""

import asyncio
import sys
from pathlib import Path

from agentroll.handlers.builtin.grading_pool import _Worker
from agentroll.handlers.builtin.verifiers_env.workers import VerifiersWorkers

FAKE_WORKER = r"""
import json, os, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "episode":
        print(json.dumps({"turn": [{"role": "user", "content": "your move"}]}), flush=True)
        sys.stdin.readline()
    elif request.get("op") == "hold":
        open(request["started"], "w").close()
        while not os.path.exists(request["release"]):
            time.sleep(0.05)
    print(json.dumps({"ok": True}), flush=True)
"""

READY_TIMEOUT_S = 60.0


class FakeVerifiersWorkers(VerifiersWorkers):
    """Workers started as `sys.executable -I -c FAKE_WORKER` (the `python` asked is a key)."""

    async def _start(self, python: Path) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            FAKE_WORKER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        worker = _Worker(process)
        self._workers.add(worker)
        async with asyncio.timeout(READY_TIMEOUT_S):
            await worker.receive()  # {"ready": true}
        return worker
