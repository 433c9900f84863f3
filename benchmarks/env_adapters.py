"""What an environment adapter adds: CPU per rollout through the `verifiers` handler against
agentroll's own `math` handler on the same task.

Both run the same rollout against the scripted backend (`echo` policy): the same system
prompt and question (`Repeat after me: \\boxed{42}`), so the same prompt tokens, one reply of
the same tokens, graded `42` against `42` (the `math` handler accepts the same plain number
without its math-verify worker; the `verifiers` handler asks a worker of the fixture taskset,
`tests/fixtures/verifiers_env_pkg`, whose reward functions compare strings). The server and the
scripted backend run in this process; the CPU counted per rollout is this process's plus the
verifiers workers' (read from /proc before they exit). The workers' start (verifiers imports in
seconds) is a one-time cost, paid in a warm-up round and reported apart. Target: <= 10 %
added CPU per rollout. A loaded machine adds noise to both sides alike: run it alone.

Measured (2 shared cores, 60 rollouts x 3 rounds): math 2.5-3.0 ms, verifiers 4.7-4.8 ms per
rollout, about +2 ms (the scoring round trip to the worker: JSON over its pipes, the trace
built and scored there, 0.4 ms of it in the worker). Against a rollout this cheap (no sandbox,
one short reply, a grade without math-verify) that misses the 10 % target; it is a fixed cost
per rollout, not a share of the rollout's own work.

    .venv/bin/python benchmarks/env_adapters.py [--rollouts 40] [--rounds 3]
"""

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _common import cpu_seconds, report

from agentroll.handlers.builtin.math import SYSTEM_PROMPT
from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import default_workers
from agentroll.server.admission import AdmissionSettings
from agentroll.server.api import create_app
from agentroll.server.schema import Outcome, PoolSizes
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients import AsyncRolloutClient

PACKAGE = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "verifiers_env_pkg")
QUESTION = "Repeat after me: \\boxed{42}"
TARGET_PERCENT = 10.0


def instance(handler: str) -> dict[str, Any]:
    if handler == "math":
        return {"question": QUESTION, "answer": "42"}
    environment = {"taskset": "agentroll-vf-echo", "packages": [PACKAGE]}
    task = {"id": "bench", "system_prompt": SYSTEM_PROMPT, "prompt": QUESTION, "answer": "42"}
    return {"environment": environment, "task": task}


def cpu_now() -> float:
    workers = default_workers().worker_pids
    return cpu_seconds(os.getpid()) + sum(cpu_seconds(pid) for pid in workers)


async def batch(client: AsyncRolloutClient, handler: str, tag: str, n: int) -> float:
    """CPU seconds per rollout of `n` rollouts of `handler`, all `ok`."""
    jobs = [
        {"job_id": f"{tag}-{k}", "handler": handler, "instance": instance(handler)}
        for k in range(n)
    ]
    before = cpu_now()
    await client.submit(jobs)
    done = await client.wait_for([j["job_id"] for j in jobs], 600)
    after = cpu_now()
    bad = [t.job_id for t in done.values() if t.outcome is not Outcome.ok]
    if bad:
        raise SystemExit(f"{handler}: rollouts not ok: {bad[:5]}")
    return (after - before) / n


async def main_async(args: argparse.Namespace) -> None:
    venv = await ensure_verifiers_venv([PACKAGE])
    how = "installed now" if venv.installed_now else "cached"
    print(f"verifiers environment: {venv.root} ({how})")
    backend = await start_in_loop(
        create_scripted_app(ScriptedLLMConfig(policy="echo", wrong_rate=0.0))
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            db_path=Path(tmp) / "a.db",
            pools=PoolSizes(run=64, init=64, ready_buffer=64),
            admission=AdmissionSettings(enabled=False),
        )
        server = await start_in_loop(create_app(settings))
        try:
            async with AsyncRolloutClient(server.url, token=server.token) as client:
                await client.add_backend({"id": "scripted", "base_url": backend.url})
                warm_math = await batch(client, "math", "warm-math", 16)
                warm_vf = await batch(client, "verifiers", "warm-vf", 16)
                print(
                    f"warm-up CPU per rollout: math {warm_math * 1000:.1f} ms, "
                    f"verifiers {warm_vf * 1000:.1f} ms (its workers' start included)"
                )
                per: dict[str, list[float]] = {"math": [], "verifiers": []}
                for r in range(args.rounds):
                    for handler in ("math", "verifiers"):
                        per[handler].append(
                            await batch(client, handler, f"{handler}-{r}", args.rollouts)
                        )
        finally:
            await server.stop()
            await backend.stop()
    math_ms = statistics.median(per["math"]) * 1000
    vf_ms = statistics.median(per["verifiers"]) * 1000
    added = (vf_ms - math_ms) / math_ms * 100
    print(f"{os.cpu_count()} cores; {args.rollouts} rollouts x {args.rounds} rounds each")
    report("math: CPU per rollout", math_ms, "ms", "-", True)
    report("verifiers: CPU per rollout", vf_ms, "ms", "-", True)
    report(
        "verifiers: added CPU per rollout",
        added,
        "%",
        f"<= {TARGET_PERCENT:g} %",
        added <= TARGET_PERCENT,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
