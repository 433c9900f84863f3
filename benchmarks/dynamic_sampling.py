"""Dynamic sampling on the demo mix: what fraction of the generated groups is worth training on?

The demo's task families (swe, code, math with a Python tool, stem, the two-agent
solve_verify; without bubblewrap only those that need no sandbox) and its scripted policies,
which solve a task or not at a seeded rate. An `AsyncDynamicSampler` fills batches of groups
whose rewards differ, refilling from an endless round-robin stream of the mix; it prints the
fraction of generated groups kept, the rollouts spent per kept rollout, and which families'
groups were dropped for equal rewards. A short run by default (2 batches of 6 groups of 4).

    .venv/bin/python benchmarks/dynamic_sampling.py [--batches 2] [--groups 6] [--n 4]
                                                    [--no-sandboxes]
"""

import argparse
import asyncio
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from agentroll.server.api import create_app
from agentroll.server.demo import (
    AGENTS,
    NEEDS_SANDBOX,
    POLICY,
    _instances,
    plan_families,
    workdir_settings,
)
from agentroll.server.schema import JobRequest, SamplingParams
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.trainer_clients import (
    AsyncDynamicSampler,
    AsyncGroupCollector,
    AsyncRolloutClient,
    GroupSpec,
)


def demo_mix(n: int, families: tuple[str, ...]) -> Iterator[GroupSpec]:
    """Endless groups of the demo's families in turn, each its own task instance."""
    make = _instances(sandboxes="swe" in families)
    g = 0
    while True:
        family = families[g % len(families)]
        instance = make[family](g // len(families))
        task = f"{family}-{instance.get('instance_id') or instance.get('id')}"
        request = JobRequest(
            handler=family,
            instance=instance,
            agents=AGENTS.get(family),
            sampling=SamplingParams(temperature=1.0, max_tokens=1024, seed=1000 * g),
        )
        yield GroupSpec(f"ds-{task}-g{g}", request, n, task_id=task)
        g += 1


async def run(batches: int, groups: int, n: int, sandboxes: bool, workdir: Path) -> None:
    backend = await start_in_loop(
        create_scripted_app(
            ScriptedLLMConfig(policy=POLICY, latency_s=0.05, seed=7, max_model_len=32768)
        )
    )
    families = plan_families(shutil.which("bwrap") is not None)
    if not sandboxes:
        families = tuple(f for f in families if f not in NEEDS_SANDBOX)
    settings = workdir_settings(workdir)
    token_file = settings.token_file
    server = await start_in_loop(create_app(settings))
    client = AsyncRolloutClient(server.url, token_file=token_file)
    try:
        async with AsyncGroupCollector(client, pool_options={"poll_wait_s": 1.0}) as collector:
            assert collector.pool is not None
            await collector.pool.add_backend({"id": "scripted-0", "base_url": backend.url})
            verifier = {"id": "scripted-verifier", "base_url": backend.url, "policy": "verifier"}
            await collector.pool.add_backend(verifier)
            sampler = AsyncDynamicSampler(collector, demo_mix(n, families))
            dropped: Counter[str] = Counter()
            kept: Counter[str] = Counter()
            started = time.monotonic()
            for _ in range(batches):
                batch = await sampler.next_batch(groups, timeout_s=600)
                kept.update(g.trajectories[0].handler for g in batch.groups)
                dropped.update(
                    f"{g.trajectories[0].handler if g.trajectories else '?'}"
                    f"{'' if g.valid else ' (invalid)'}"
                    for g in batch.dropped
                )
            elapsed = time.monotonic() - started
            stats = collector.stats.dynamic
    finally:
        await client.close()
        await server.stop()
        await backend.stop()
    print(f"demo mix over {', '.join(families)}: {batches} batches of {groups} groups of {n}")
    print(f"  groups generated {stats.groups_generated}, kept {stats.groups_kept}")
    print(f"  fraction of generated groups kept  {stats.groups_kept / stats.groups_generated:.2f}")
    spent = stats.rollouts_spent / max(stats.rollouts_kept, 1)
    print(f"  rollouts spent per rollout kept    {spent:.2f}")
    print(f"  kept by family    {dict(sorted(kept.items()))}")
    print(f"  dropped by family {dict(sorted(dropped.items()))}")
    print(f"  wall {elapsed:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--groups", type=int, default=6, help="groups per batch")
    parser.add_argument("--n", type=int, default=4, help="samples per group")
    parser.add_argument(
        "--no-sandboxes", action="store_true", help="only the families that need no sandbox"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentroll-dynamic-") as workdir:
        run_it = run(args.batches, args.groups, args.n, not args.no_sandboxes, Path(workdir))
        asyncio.run(run_it)


if __name__ == "__main__":
    main()
