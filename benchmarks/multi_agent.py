"""Multi-agent rollouts under load: 1,000 two-agent episodes, skewed 4:1 between the agents.

Each episode is a `worker` agent (policy `worker`) taking 4 turns of one conversation, then a
`critic` agent (policy `critic`) reviewing it in 1 turn: 4 generation calls to the worker's
pool for each call to the critic's. Each policy has its own scripted backends (`agentroll
scripted-llm` processes, `--latency` seconds per call) and its own generation gate, as in the
server (`Policies`): every call goes through agentroll's token session (routing within its
policy's pool, the gate, the keep-alive HTTP client).

Reports agentroll's CPU per generation (this process, turns' tokenization included) and, in a
second wave, what a weight update of the worker's policy costs: a `wait` pause of `worker`
closes its gate mid-wave, returns once its last in-flight call is done, holds for one latency
and resumes at version 1, while the critics keep generating (the second wave's episodes
start spread over one episode's length, so both agents are busy when the pause comes).
Targets: <= 1 ms CPU per generation (as single-agent, benchmarks/llm_concurrency.py); the
pause returns within 50 ms of the worker's last in-flight call; no worker call is dispatched
while paused; critics generate meanwhile; every segment carries its own policy's version.

    .venv/bin/python benchmarks/multi_agent.py [--episodes 1000] [--latency 1.0]
"""

import argparse
import asyncio
import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from _common import cpu_seconds, report

from agentroll.server.launch import agentroll_process
from agentroll.server.llm import BackendPool, HTTPClient, TokenSession
from agentroll.server.llm.policies import Policies
from agentroll.server.schema import BackendSpec

WORKER_TURNS = 4
POLICIES = ("worker", "critic")


@dataclass
class Wave:
    worker_done: list[float] = field(default_factory=list)
    """When each worker generation call returned."""
    sessions: list[tuple[TokenSession, TokenSession]] = field(default_factory=list)


def session(pool: BackendPool, policies: Policies, policy: str) -> TokenSession:
    return TokenSession(
        pool,
        sampling={"temperature": 1.0, "max_tokens": 24},
        max_response_tokens=4096,
        max_context_tokens=None,
        gate=policies.get(policy).gate,
        request_timeout_s=120,
        policy=policy,
    )


async def episode(
    pool: BackendPool, policies: Policies, k: int, wave: Wave, delay_s: float = 0.0
) -> None:
    await asyncio.sleep(delay_s)
    worker, critic = session(pool, policies, "worker"), session(pool, policies, "critic")
    wave.sessions.append((worker, critic))
    await worker.start([{"role": "user", "content": f"Repeat after me: task {k} begins"}])
    for turn in range(WORKER_TURNS):
        if turn:
            await worker.add_messages(
                [{"role": "user", "content": f"Repeat after me: step {turn}"}]
            )
        await worker.generate()
        wave.worker_done.append(time.monotonic())
    review = f"Repeat after me: task {k} reviewed, {worker.response_tokens} tokens"
    await critic.start([{"role": "user", "content": review}])
    await critic.generate()


async def steady_wave(
    pool: BackendPool, policies: Policies, pids: list[int], n: int
) -> tuple[Wave, float, float, float]:
    """All episodes at once: (wave, wall s, agentroll CPU s, scripted backends' CPU s)."""
    wave = Wave()
    backend_cpu0 = sum(cpu_seconds(pid) for pid in pids)
    cpu0, started = os.times(), time.monotonic()
    await asyncio.gather(*(episode(pool, policies, k, wave) for k in range(n)))
    elapsed, cpu1 = time.monotonic() - started, os.times()
    ours = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return wave, elapsed, ours, sum(cpu_seconds(pid) for pid in pids) - backend_cpu0


@dataclass
class PauseFigures:
    closed_to_quiet_s: float
    after_last_call_ms: float
    held_back: int
    worker_while_paused: int
    critic_meanwhile: int
    spanning: int
    versions_right: bool


async def paused_wave(
    pool: BackendPool, policies: Policies, n: int, latency: float
) -> PauseFigures:
    """A weight update of the worker's policy once the wave runs in a steady state (episodes
    start spread over one episode's length, so both agents are busy all along)."""
    worker, critic = policies.get("worker").gate, policies.get("critic").gate
    wave = Wave()
    length_s = (WORKER_TURNS + 1) * latency
    tasks = [
        asyncio.create_task(episode(pool, policies, n + k, wave, length_s * k / n))
        for k in range(n)
    ]
    await asyncio.sleep(length_s)
    critic_before = critic.load.generations
    closed = time.monotonic()
    worker.close("wait")
    await worker.wait_quiet(120)
    quiet = time.monotonic()
    last_worker_call = max([closed, *wave.worker_done])
    worker_at_quiet = worker.load.generations
    await asyncio.sleep(latency)  # the trainer loads new weights; the critics go on
    figures = PauseFigures(
        closed_to_quiet_s=quiet - closed,
        after_last_call_ms=(quiet - last_worker_call) * 1000,
        held_back=worker.waiting,
        worker_while_paused=worker.load.generations - worker_at_quiet,
        critic_meanwhile=critic.load.generations - critic_before,
        spanning=0,
        versions_right=False,
    )
    worker.open(1)
    await asyncio.gather(*tasks)
    figures.spanning = sum(
        w.segments[0].policy_version == 0 and w.segments[-1].policy_version == 1
        for w, _ in wave.sessions
    )
    critic_versions = {s.policy_version for _, c in wave.sessions for s in c.segments}
    figures.versions_right = critic_versions == {0} and figures.spanning > 0
    return figures


async def measure(urls: dict[str, list[str]], pids: list[int], n: int, latency: float) -> None:
    http = HTTPClient(timeout_s=120)
    pool = BackendPool(http)
    for policy, addresses in urls.items():
        for i, url in enumerate(addresses):
            spec = {"id": f"{policy}-{i}", "base_url": url, "policy": policy}
            pool.add(BackendSpec.model_validate({**spec, "max_concurrency": 100_000}))
    policies = Policies()
    await asyncio.gather(*(episode(pool, policies, -k, Wave()) for k in range(1, 101)))  # warm
    wave, elapsed, ours, backends_cpu = await steady_wave(pool, policies, pids, n)
    pause = await paused_wave(pool, policies, n, latency)
    await http.close()

    turns = {p: sum(s[i].num_turns for s in wave.sessions) for i, p in enumerate(POLICIES)}
    calls = {p: sum(s[i].llm_calls for s in wave.sessions) for i, p in enumerate(POLICIES)}
    cpu_ms = ours * 1000 / sum(turns.values())
    print(
        f"multi_agent: {n} two-agent episodes ({WORKER_TURNS}:1 worker:critic calls), "
        f"{len(urls['worker'])}+{len(urls['critic'])} backends, {latency:g} s latency"
    )
    print(
        f"  generations: worker {turns['worker']}, critic {turns['critic']}; backend calls "
        f"(tokenization included): worker {calls['worker']}, critic {calls['critic']}"
    )
    print(f"  wall {elapsed:.2f} s (ideal {(WORKER_TURNS + 1) * latency:.2f} s)")
    print(
        f"  CPU: agentroll {ours:.2f} s ({ours * 1000 / sum(calls.values()):.2f} ms per backend "
        f"call) + scripted backends {backends_cpu:.2f} s on {os.cpu_count()} cores"
    )
    print(
        f"  worker pause: closed to quiet {1000 * pause.closed_to_quiet_s:.0f} ms; "
        f"{pause.held_back} worker calls held at its gate; {pause.critic_meanwhile} critic "
        f"generations meanwhile; {pause.spanning} worker traces span versions 0->1"
    )
    report("agentroll CPU per generation", cpu_ms, "ms", "<= 1", cpu_ms <= 1.0)
    barrier = pause.after_last_call_ms
    report("worker pause returns after last call", barrier, "ms", "<= 50", barrier <= 50)
    stray = pause.worker_while_paused
    report("worker calls dispatched while paused", stray, "calls", "0", stray == 0)
    meanwhile = pause.critic_meanwhile
    report("critic generations during the pause", meanwhile, "calls", "> 0", meanwhile > 0)
    right = pause.versions_right
    report("versions right per policy", float(right), "1=yes", "1", right)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--backends-per-policy", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        llm_args = ["scripted-llm", "--port", "0", "--latency-s", str(args.latency)]
        procs = {
            policy: [
                # niced: they stand in for GPU servers on other nodes, not this one's cores
                stack.enter_context(agentroll_process(llm_args, Path(tmp), f"{policy}{i}", nice=10))
                for i in range(args.backends_per_policy)
            ]
            for policy in POLICIES
        }
        urls = {policy: [p.url for p in ps] for policy, ps in procs.items()}
        pids = [p.pid for ps in procs.values() for p in ps]
        asyncio.run(measure(urls, pids, args.episodes, args.latency))


if __name__ == "__main__":
    main()
