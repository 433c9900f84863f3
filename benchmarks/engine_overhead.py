"""What agentroll adds on top of a real engine: vLLM's CPU build serving the tiny model.

Rollouts of `--turns` turns (`--tokens` sampled per turn, a user message between turns) run
through an in-process agentroll server against one vLLM server; then the very same calls
(the same token-id prompts, sampling and seeds, so the engine does the same work) are made
straight to that vLLM by a minimal client, at the same concurrency. At 1 and 64 concurrent
rollouts:

- per generation: how long the handler's `generate()` took (gate, routing, HTTP, JSON,
  recording) minus the direct `/v1/completions` call's latency, medians;
- per rollout: the whole rollout through agentroll (`timing.total_s`: queueing, stages,
  template deltas, the store) minus the direct client's time for its calls (one `/tokenize`
  of the conversation so far and one `/v1/completions` per turn), medians.

The engine is set up by code and cached (docs/engine.md). Its own timings (`engine start`)
are printed beside. Targets: <= 5 ms added per generation, <= 100 ms added per rollout, at
either concurrency. On a loaded machine the medians carry its noise: run it alone.

    .venv/bin/python benchmarks/engine_overhead.py [--rollouts 64] [--turns 3] [--tokens 32]
        [--rounds 3]
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
from _common import report

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.server.admission import AdmissionSettings
from agentroll.server.api import create_app
from agentroll.server.engine import VLLMServer
from agentroll.server.schema import PoolSizes, Trajectory
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.testing.tiny_model import prepare_tiny_engine
from agentroll.trainer_clients import AsyncRolloutClient

SYSTEM = {"role": "system", "content": "Answer briefly."}
GENERATION_TARGET_MS = 5.0
ROLLOUT_TARGET_MS = 100.0


class Turns(AgentHandler):
    name: ClassVar[str] = "turns"

    async def run(self, ctx: RolloutContext) -> None:
        took: list[float] = []
        await ctx.llm.start([SYSTEM, {"role": "user", "content": "Say something: 0"}])
        for k in range(int(ctx.instance["turns"])):
            if k:
                await ctx.llm.add_messages([{"role": "user", "content": f"Say something: {k}"}])
            started = time.perf_counter()
            await ctx.llm.generate()
            took.append(time.perf_counter() - started)
        ctx.state["generate_s"] = took

    async def eval(self, ctx: RolloutContext) -> Reward:
        # How long each `generate()` took, as the handler saw it: reported with the reward.
        return Reward(1.0, {"generate_s": ctx.state["generate_s"]})


@dataclass
class Rig:
    """What each measurement section gets: the engine and an agentroll server using it."""

    engine: VLLMServer
    client: AsyncRolloutClient
    args: argparse.Namespace


async def through_agentroll(rig: Rig, concurrency: int, tag: str) -> list[Trajectory]:
    jobs = [
        {
            "job_id": f"{tag}-{i}",
            "handler": "turns",
            "instance": {"turns": rig.args.turns},
            "sampling": {"max_tokens": rig.args.tokens, "seed": i, "temperature": 1.0},
        }
        for i in range(concurrency)
    ]
    await rig.client.submit(jobs)
    done = await rig.client.wait_for([j["job_id"] for j in jobs], 1800)
    results = list(done.values())
    bad = [t for t in results if t.outcome.value != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} rollouts not ok, e.g. {bad[0].error}")
    return results


@dataclass
class Direct:
    """The minimal client's record: per-call latencies, and calls that sampled other ids."""

    calls: list[float]
    diverged: int = 0


async def direct_rollout(http: httpx.AsyncClient, t: Trajectory, seed: int, rec: Direct) -> float:
    """The same calls as `t`'s rollout, straight to the engine; returns their total time."""
    started = time.perf_counter()
    for k, segment in enumerate(t.segments):
        conversation = t.messages[: 2 * k + 2]  # system, (user, assistant) pairs, this user
        rendered = await http.post(
            "/tokenize",
            json={"model": "policy", "messages": conversation, "add_generation_prompt": True},
        )
        rendered.raise_for_status()
        body = {
            "model": "policy",
            "prompt": t.prompt_ids + t.response_ids[: segment.start],
            "max_tokens": segment.end - segment.start,
            "seed": seed,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "logprobs": 0,
            "return_token_ids": True,
        }
        call_started = time.perf_counter()
        answer = await http.post("/v1/completions", json=body)
        answer.raise_for_status()
        rec.calls.append(time.perf_counter() - call_started)
        # Same prompt, seed and length: the same ids, unless another batch shape tipped a
        # near-tie (counted: the work is still the same size).
        rec.diverged += (
            answer.json()["choices"][0]["token_ids"] != t.response_ids[segment.start : segment.end]
        )
    return time.perf_counter() - started


async def _round(
    rig: Rig, concurrency: int, tag: str
) -> tuple[list[Trajectory], list[float], Direct]:
    """`concurrency` rollouts through agentroll, then their calls again, direct."""
    results = await through_agentroll(rig, concurrency, tag)
    rec = Direct([])
    async with httpx.AsyncClient(base_url=rig.engine.url, timeout=600) as http:
        direct = await asyncio.gather(
            *(direct_rollout(http, t, int(t.job_id.rsplit("-", 1)[1]), rec) for t in results)
        )
    return results, list(direct), rec


async def generation_overhead(rig: Rig) -> None:
    """Added latency per generation and per rollout, at 1 and `--rollouts` concurrent."""
    await _round(rig, 2, "warm-up")  # first calls: detection, tokenizer, engine warm-up
    for concurrency in sorted({1, rig.args.rollouts}):
        results: list[Trajectory] = []
        direct: list[float] = []
        rec = Direct([])
        for r in range(rig.args.rounds):
            got, took, calls = await _round(rig, concurrency, f"c{concurrency}r{r}")
            results += got
            direct += took
            rec.calls += calls.calls
            rec.diverged += calls.diverged
        per_call = statistics.median(s for t in results for s in t.reward_info["generate_s"])
        per_rollout = statistics.median(t.timing.total_s for t in results)
        direct_call = statistics.median(rec.calls)
        gen_ms = 1000 * (per_call - direct_call)
        ro_ms = 1000 * (per_rollout - statistics.median(direct))
        print(
            f"\n{concurrency} concurrent rollouts of {rig.args.turns} turns x "
            f"{rig.args.tokens} tokens, {rig.args.rounds} rounds: generation call "
            f"{1000 * per_call:.1f} ms through agentroll, {1000 * direct_call:.1f} ms direct; "
            f"rollout {per_rollout:.3f} s through agentroll, {statistics.median(direct):.3f} s "
            f"direct ({rec.diverged} of {len(rec.calls)} direct calls sampled other ids)"
        )
        report(
            f"added per generation, {concurrency} rollouts",
            gen_ms,
            "ms",
            f"<= {GENERATION_TARGET_MS:g}",
            gen_ms <= GENERATION_TARGET_MS,
        )
        report(
            f"added per rollout, {concurrency} rollouts",
            ro_ms,
            "ms",
            f"<= {ROLLOUT_TARGET_MS:g}",
            ro_ms <= ROLLOUT_TARGET_MS,
        )


# Each section measures one thing against the same engine and agentroll server. Weight
# updates into the engine (pause, update, resume; their timings) are measured as a section
# of their own, appended here.
SECTIONS: list[Callable[[Rig], Awaitable[None]]] = [generation_overhead]


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    environment, model = await prepare_tiny_engine()
    print(
        f"engine_overhead: set-up {time.perf_counter() - started:.1f} s "
        f"({'installed' if environment.installed_now else 'cached'}: {environment.root})"
    )
    registry = HandlerRegistry()
    registry.register(Turns)
    with tempfile.TemporaryDirectory(prefix="engine-overhead-") as tmp:
        async with VLLMServer(environment.python, model, Path(tmp) / "vllm.log") as engine:
            print(f"engine start {engine.start_seconds:.1f} s ({engine.url})")
            settings = Settings(
                db_path=Path(tmp) / "a.db",
                pools=PoolSizes(run=256, init=256, ready_buffer=256),
                admission=AdmissionSettings(enabled=False),
            )
            server = await start_in_loop(create_app(settings, registry=registry))
            try:
                async with AsyncRolloutClient(server.url, token=server.token) as client:
                    await client.add_backend({"id": "vllm-cpu-0", "base_url": engine.url})
                    rig = Rig(engine, client, args)
                    for section in SECTIONS:
                        await section(rig)
            finally:
                await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=64, help="the high concurrency")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32, help="sampled per turn")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
