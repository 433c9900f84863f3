"""`agentroll demo`: the whole loop on one machine, no GPU.

Starts the scripted vLLM-protocol backend and an agentroll server in-process on free
loopback ports, registers the backend like a trainer would, submits the bundled math
tasks in GRPO-style groups, follows the results cursor with a progress bar, then prints
a per-group summary and one trajectory's tokens, mask and logprobs.
"""

import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.server.api import create_app
from agentroll.server.schema import JobRequest, SamplingParams, Trajectory
from agentroll.server.scripted_llm import ScriptedLLMConfig, get_tokenizer
from agentroll.server.scripted_llm import create_app as create_scripted_app
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.trainer_clients import AsyncRolloutClient

RESULT_TIMEOUT_S = 600.0


def _progress(done: int, total: int, rewards: list[float], started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    mean = statistics.fmean(rewards) if rewards else 0.0
    line = (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} rollouts"
        f"  mean reward {mean:.2f}  {time.monotonic() - started:5.1f}s"
    )
    if sys.stderr.isatty():
        print(line, end="", file=sys.stderr, flush=True)
    elif done == total or done % max(1, total // 10) == 0:
        print(line.strip(), file=sys.stderr, flush=True)


def _jobs(groups: int, group_size: int) -> list[JobRequest]:
    tasks = load_math_tasks()
    out = []
    for g in range(groups):
        task = tasks[g % len(tasks)]
        group_id = f"{task.id}-g{g}"
        for k in range(group_size):
            out.append(
                JobRequest(
                    job_id=f"{group_id}-s{k}",
                    handler="math",
                    instance=task.instance(),
                    group_id=group_id,
                    sampling=SamplingParams(temperature=1.0, max_tokens=512, seed=1000 * g + k),
                )
            )
    return out


def _summary(results: list[Trajectory]) -> None:
    by_group: dict[str, list[Trajectory]] = defaultdict(list)
    for t in results:
        by_group[t.group_id or t.job_id].append(t)
    print(
        f"\n{'group':<22} {'rewards':<18} {'mean':>5} {'outcomes':<14} {'queue s':>8} {'work s':>7}"
    )
    for group_id in sorted(by_group):
        group = sorted(by_group[group_id], key=lambda t: t.job_id)
        rewards = [t.reward for t in group if t.reward is not None]
        outcomes = Counter(t.outcome.value for t in group)
        queue = statistics.fmean(
            sum(s.queue_s for s in (t.timing.init, t.timing.run, t.timing.eval) if s) for t in group
        )
        work = statistics.fmean(
            sum(s.work_s for s in (t.timing.init, t.timing.run, t.timing.eval) if s) for t in group
        )
        shown = " ".join(f"{r:g}" for r in rewards)
        mean = f"{statistics.fmean(rewards):.2f}" if rewards else "-"
        outcome_text = ",".join(f"{k}:{v}" for k, v in sorted(outcomes.items()))
        print(f"{group_id:<22} {shown:<18} {mean:>5} {outcome_text:<14} {queue:8.3f} {work:7.3f}")


def _excerpt(trajectory: Trajectory, rows: int = 16) -> None:
    tokenizer = get_tokenizer()
    print(
        f"\ntrajectory {trajectory.job_id}: reward {trajectory.reward}, outcome "
        f"{trajectory.outcome.value}, {trajectory.num_turns} turn(s), "
        f"{len(trajectory.prompt_ids)} prompt + {len(trajectory.response_ids)} response tokens"
    )
    print(f"{'pos':>4} {'token id':>8} {'mask':>4} {'logprob':>9}  piece")
    for pos in range(min(rows, len(trajectory.response_ids))):
        token = trajectory.response_ids[pos]
        piece = tokenizer.decode([token]).replace("\n", "\\n")
        print(
            f"{pos:>4} {token:>8} {trajectory.response_mask[pos]:>4} "
            f"{trajectory.response_logprobs[pos]:>9.4f}  {piece!r}"
        )
    for seg in trajectory.segments:
        print(
            f"segment [{seg.start}, {seg.end}) backend={seg.backend_id} "
            f"policy_version={seg.policy_version} finish={seg.finish_reason}"
        )


async def _run(groups: int, group_size: int, latency_s: float, workdir: Path) -> int:
    backend = await start_in_loop(
        create_scripted_app(ScriptedLLMConfig(policy="math", latency_s=latency_s, seed=7))
    )
    server = await start_in_loop(create_app(Settings(db_path=workdir / "agentroll.db")))
    print(f"scripted vLLM backend at {backend.url}; agentroll server at {server.url}")
    try:
        async with AsyncRolloutClient(server.url) as client:
            await client.add_backend({"id": "scripted-0", "base_url": backend.url})
            jobs = _jobs(groups, group_size)
            started = time.monotonic()
            await client.submit(jobs)
            results: list[Trajectory] = []
            async with asyncio.timeout(RESULT_TIMEOUT_S):
                async for trajectory in client.iter_results(wait=5.0):
                    results.append(trajectory)
                    rewards = [t.reward for t in results if t.reward is not None]
                    _progress(len(results), len(jobs), rewards, started)
                    if len(results) == len(jobs):
                        break
            elapsed = time.monotonic() - started
        print()
        _summary(results)
        rewards = [t.reward for t in results if t.reward is not None]
        print(
            f"\n{len(results)} rollouts in {elapsed:.1f}s ({len(results) / elapsed:.1f}/s), "
            f"mean reward {statistics.fmean(rewards):.3f}, outcomes "
            f"{dict(Counter(t.outcome.value for t in results))}"
        )
        multi_turn = [t for t in results if t.num_turns > 1]
        _excerpt((multi_turn or results)[0])
        return 0 if all(t.outcome.value == "ok" for t in results) else 1
    finally:
        await server.stop()
        await backend.stop()


def run_demo(groups: int = 20, group_size: int = 4, latency_s: float = 0.05) -> int:
    with tempfile.TemporaryDirectory(prefix="agentroll-demo-") as workdir:
        return asyncio.run(_run(groups, group_size, latency_s, Path(workdir)))
