"""What an environment adapter adds: CPU per rollout through it against an agentroll handler
doing the same task.

- `verifiers` against the built-in `math` handler: the same system prompt and question
  (`Repeat after me: \\boxed{42}`, the scripted `echo` policy), so the same tokens, graded
  `42` against `42` (`math` accepts the same plain number without its math-verify worker; the
  adapter asks a worker of the fixture taskset, `tests/fixtures/verifiers_env_pkg`, whose
  reward functions compare strings). CPU counted: this process and the verifiers workers'
  process trees (bubblewrap and the worker it confines, read from /proc before they exit,
  with the children a worker forked and reaped to score one rollout each); their start
  (verifiers imports in seconds) is paid in a warm-up round and reported apart.
- `verifiers_legacy` against the same `math` rollout: a legacy environment's row
  (`agentroll-vf-legacy-exec` in `tests/fixtures/verifiers_legacy_pkg`, a `SingleTurnEnv`
  whose reward functions compare strings), its rollout and rubric run in a child forked from a
  worker of the verifiers 0.3.1 environment; CPU counted as for `verifiers`.
- `openenv` against `native_guess`, the same guessing game written as an agentroll handler (a
  `step` tool answering the same JSON in-process), played by the scripted `openenv_guess`
  policy to the same four steps. CPU counted: this process; the environment server's own CPU
  (openenv-core's server, `agentroll.testing.openenv`) is the environment's work, printed apart.
- `openreward` against `native_ors_guess`, the same game behind a `guess` tool answering the
  same text in-process, played by the scripted `openreward_guess` policy to the same four calls;
  CPU counted as for openenv (openreward's own server, `agentroll.testing.openreward`, apart).

The agentroll server and the scripted backend run in this process, alike for both sides.
Target: <= 10 % added CPU per rollout. A loaded machine adds noise to both sides: run it alone.

    .venv/bin/python benchmarks/env_adapters.py [--rollouts 60] [--rounds 3]
        [--only verifiers|verifiers_legacy|openenv|openreward]

Measured (2 shared cores, 60 rollouts x 3 rounds, two runs): math 2.5-2.7 ms, verifiers
3.5-4.0 ms per rollout (+1.0-1.3 ms, +40-50 %: the scoring round trip to the confined worker,
JSON over its pipes, the trace built and scored there, 0.4 ms of it in the worker).
Since each scoring runs in a child forked from the warm worker (so that no rollout's text
persists into another's scoring): math 3.0 ms, verifiers 28.3 ms (+25 ms, +844 %), against
3.3 and 5.7 ms (+70 %) without the fork, back to back on a node at load 23 (30 rollouts x 3
rounds); in the worker alone, 21 ms against 0.6 ms of CPU per scoring, of which a bare fork
and exit of the 220 MB worker is 8-12 ms on this VM (page tables copied and torn down).
verifiers_legacy (30 rollouts x 3 rounds, load 2.5-2.8 on 2 cores, right after verifiers in
the same minute): math 3.0 ms, verifiers_legacy 23.7 ms (+689 %), verifiers 26.3 ms against
math 3.3 ms: the same fork per rollout dominates (its INIT asks the worker for the row's tools
once more, without a fork; the rollout relays the one reply over the worker's pipes).
Where the forked child's CPU went (the fixture worker alone, 100 scorings): 17.8 ms per
scoring, 0.3 ms of it the scoring itself; a bare fork and exit of the ~220 MB worker (180 MB of
it the Python heap verifiers' imports leave) 8 ms (page-table entries copied and torn down,
4 KiB each); the child's writes ~2,000 copied pages, half of them caches the first
scoring builds (pydantic validators, `isinstance` caches, package metadata), rebuilt in every
child since the worker never scored itself. Now the worker's heap sits in transparent huge
pages (`workers.FORK_FRIENDLY_ENV`: a bare fork and exit 2-2.5 ms) and a taskset's first
scoring runs once in the worker on its control (`worker.warm_up_once`): 12.4 ms per scoring
with huge pages alone, 8.2-9.2 ms with both. Interleaved A/B runs (30 rollouts x 3 rounds,
2 shared cores), before / after: verifiers 22.3-24.7 / 11.0-12.7 ms against math 2.7-3.3 ms
(+640 % / +270-375 %, two pairs at load 2.1-2.7), 25.3-29.7 / 14.7-17.0 ms (+790-850 % /
+300-410 %, two pairs at load 1.5-7.3; the warm-up alone, before huge pages reached the
worker: 19.0-19.3 against 20.7-21.7 ms); verifiers_legacy, whose rollouts get the huge pages
but no warm-up (its rollout relays turns, which the worker cannot answer alone): 21.7-22.3
against 29.0-31.3 ms (two pairs at load 6.8-8.6; math 2.7-3.7 ms).
The rest is the floor of a fork per request on this VM: the fork and exit (~2 ms with huge
pages), and the ~1,000 pages (4 KiB each, copied on write) that scoring's reference counts and
allocations touch in the child.
OpenEnv: native_guess 12.0-12.7 ms, openenv 14.3-14.5 ms per rollout (+1.7-2.5 ms, +13-21 %: a
WebSocket session and a `/schema` request per episode, JSON frames; the environment server's
own 3.1-3.3 ms apart). Both miss the 10 % target against rollouts this cheap (no sandbox,
short replies, in-process grading): the cost is fixed per rollout (per step for openenv's
frames), not a share of the rollout's own work. An httpx client per rollout cost another 14 ms
(its creation), so the adapter uses aiohttp for `/schema` as well. Figures are whole clock
ticks (10 ms) over 60 rollouts: +-0.2 ms.

openreward (40 rollouts x 3 rounds, three runs on a node at load 8-11 on 2 cores, so noisy):
native_ors_guess 15.5-17.3 ms, openreward 17.0-21.8 ms per rollout (+0.75-5.75 ms, +4-36 %,
median +9.7 %: ten HTTP requests per episode, `/create_session` to `/delete_session`, four of
them tool calls answered over SSE; the environment server's own 9-12 ms apart). openenv in the
same hour: +0.75 ms (+3.9 %). Run it on a quiet node before quoting either against the target.
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from _common import cpu_seconds, report

from agentroll.handlers import HandlerRegistry, Reward, RolloutContext
from agentroll.handlers.agent import AgentLoop, Tool, ToolAgentHandler
from agentroll.handlers.builtin.math.handler import SYSTEM_PROMPT
from agentroll.handlers.builtin.openenv import SYSTEM_PROMPT as OPENENV_SYSTEM_PROMPT
from agentroll.handlers.builtin.openreward.handler import SYSTEM_PROMPT as OPENREWARD_SYSTEM_PROMPT
from agentroll.handlers.builtin.verifiers_env import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.venv import LEGACY, V1
from agentroll.handlers.builtin.verifiers_env.workers import default_workers
from agentroll.runtime import Sandbox
from agentroll.server.admission import AdmissionSettings
from agentroll.server.api import create_app
from agentroll.server.schema import Outcome, PoolSizes
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.testing.openenv import guess_server
from agentroll.testing.openreward import openreward_server
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.uvicorn_app import AppServer
from agentroll.trainer_clients import AsyncRolloutClient

PACKAGE = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "verifiers_env_pkg")
LEGACY_PACKAGE = str(
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "verifiers_legacy_pkg"
)
QUESTION = "Repeat after me: \\boxed{42}"
TARGET_PERCENT = 10.0
TARGET = 7
FIRST = {"observation": {"prompt": "Guess the number from 1 to 10.", "feedback": ""}}


class NativeStep(Tool):
    """The guessing game in-process, answering what the OpenEnv server answers."""

    name = "step"
    description = "Take one action in the environment."
    argument = "guess"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"guess": {"type": "integer", "description": "Your guess, 1 to 10."}},
        "required": ["guess"],
    }

    def __init__(self) -> None:
        self.rewards: list[float] = []
        self.done = False

    def episode_over(self) -> bool:
        return self.done

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        guess = int(args[self.argument])
        self.done = guess == TARGET
        feedback = "correct" if self.done else "higher" if guess < TARGET else "lower"
        return self.answer(feedback)

    def answer(self, feedback: str) -> str:
        reward = 1.0 if self.done else -0.1
        self.rewards.append(reward)
        answer = {"observation": {"prompt": "", "feedback": feedback}, "reward": reward}
        return json.dumps({**answer, "done": self.done})


class NativeOrsGuessTool(NativeStep):
    """The guessing game in-process, answering what the Open Reward Standard server answers."""

    name = "guess"
    description = "Guess the number."
    argument = "number"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "number": {"type": "integer", "minimum": 1, "maximum": 10, "title": "Number"}
        },
        "required": ["number"],
    }

    def answer(self, feedback: str) -> str:
        self.rewards.append(1.0 if self.done else 0.0)
        return feedback


class NativeGuess(ToolAgentHandler):
    name: ClassVar[str] = "native_guess"
    system_prompt = OPENENV_SYSTEM_PROMPT
    default_tools = ()
    game: ClassVar[type[NativeStep]] = NativeStep

    async def init(self, ctx: RolloutContext) -> None:
        """No sandbox: the game runs in the handler."""

    def task_prompt(self, ctx: RolloutContext) -> str:
        first = {**FIRST, "reward": None, "done": False}
        return f"First observation: {json.dumps(first)}"

    async def run(self, ctx: RolloutContext) -> None:
        tool = ctx.state["game"] = self.game()
        config = self.agent_config(ctx)
        await AgentLoop([tool], config).run(ctx, self.first_messages(ctx, config))

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(sum(ctx.state["game"].rewards))


class NativeOrsGuess(NativeGuess):
    name: ClassVar[str] = "native_ors_guess"
    system_prompt = OPENREWARD_SYSTEM_PROMPT
    game = NativeOrsGuessTool

    def task_prompt(self, ctx: RolloutContext) -> str:
        return "Guess the number from 1 to 10 with the guess tool."


def verifiers_instance() -> dict[str, Any]:
    environment = {"taskset": "agentroll-vf-echo", "packages": [PACKAGE]}
    task = {"id": "bench", "system_prompt": SYSTEM_PROMPT, "prompt": QUESTION, "answer": "42"}
    return {"environment": environment, "task": task}


def legacy_instance() -> dict[str, Any]:
    environment = {"id": "agentroll-vf-legacy-exec", "packages": [LEGACY_PACKAGE]}
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    return {"environment": environment, "row": {"prompt": prompt, "answer": "42", "example_id": 0}}


def reaped_cpu(pid: int) -> float:
    """CPU seconds of the children `pid` has reaped (a worker's forked scoring children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid`, the children it reaped, and every live process under it (a
    confined worker is the grandchild of the bubblewrap process the pool knows)."""
    total = cpu_seconds(pid) + reaped_cpu(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += tree_cpu(int(child))
    return total


def verifiers_cpu() -> float:
    workers = default_workers().worker_pids
    return cpu_seconds(os.getpid()) + sum(tree_cpu(pid) for pid in workers)


def own_cpu() -> float:
    return cpu_seconds(os.getpid())


async def batch(
    client: AsyncRolloutClient,
    handler: str,
    instance: dict[str, Any],
    tag: str,
    n: int,
    cpu: Callable[[], float],
) -> float:
    """CPU seconds per rollout of `n` rollouts of `handler`, all `ok`."""
    jobs = [{"job_id": f"{tag}-{k}", "handler": handler, "instance": instance} for k in range(n)]
    before = cpu()
    await client.submit(jobs)
    done = await client.wait_for([j["job_id"] for j in jobs], 600)
    after = cpu()
    bad = [t.job_id for t in done.values() if t.outcome is not Outcome.ok]
    if bad:
        raise SystemExit(f"{handler}: rollouts not ok: {bad[:5]}")
    return (after - before) / n


@asynccontextmanager
async def service(policy: str) -> AsyncIterator[AsyncRolloutClient]:
    registry = HandlerRegistry()
    registry.register(NativeGuess)
    registry.register(NativeOrsGuess)
    backend = await start_in_loop(
        create_scripted_app(ScriptedLLMConfig(policy=policy, wrong_rate=0.0))
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            db_path=Path(tmp) / "a.db",
            pools=PoolSizes(run=64, init=64, ready_buffer=64),
            admission=AdmissionSettings(enabled=False),
        )
        server = await start_in_loop(create_app(settings, registry=registry))
        try:
            async with AsyncRolloutClient(server.url, token=server.token) as client:
                await client.add_backend({"id": "scripted", "base_url": backend.url})
                yield client
        finally:
            await server.stop()
            await backend.stop()


async def compare(
    client: AsyncRolloutClient,
    args: argparse.Namespace,
    sides: dict[str, tuple[str, dict[str, Any]]],
    cpu: Callable[[], float],
) -> dict[str, float]:
    """Median CPU ms per rollout of each side, rounds alternating, after a warm-up."""
    for label, (handler, instance) in sides.items():
        warm = await batch(client, handler, instance, f"warm-{label}", 16, cpu)
        print(f"  warm-up CPU per rollout, {label}: {warm * 1000:.1f} ms")
    per: dict[str, list[float]] = {label: [] for label in sides}
    for r in range(args.rounds):
        for label, (handler, instance) in sides.items():
            per[label].append(
                await batch(client, handler, instance, f"{label}-{r}", args.rollouts, cpu)
            )
    return {label: statistics.median(v) * 1000 for label, v in per.items()}


def verdict(baseline: str, adapter: str, ms: dict[str, float]) -> None:
    added = (ms[adapter] - ms[baseline]) / ms[baseline] * 100
    report(f"{baseline}: CPU per rollout", ms[baseline], "ms", "-", True)
    report(f"{adapter}: CPU per rollout", ms[adapter], "ms", "-", True)
    ok = added <= TARGET_PERCENT
    report(f"{adapter}: added CPU per rollout", added, "%", f"<= {TARGET_PERCENT:g} %", ok)


async def verifiers_side(args: argparse.Namespace, legacy: bool = False) -> None:
    adapter, instance = ("verifiers", verifiers_instance())
    if legacy:
        adapter, instance = ("verifiers_legacy", legacy_instance())
    packages = instance["environment"]["packages"]
    venv = await ensure_verifiers_venv(packages, stack=LEGACY if legacy else V1)
    how = "installed now" if venv.installed_now else "cached"
    print(f"{adapter}: environment {venv.root} ({how})")
    async with service("echo") as client:
        math_instance = {"question": QUESTION, "answer": "42"}
        sides = {"math": ("math", math_instance), adapter: (adapter, instance)}
        ms = await compare(client, args, sides, verifiers_cpu)
    verdict("math", adapter, ms)


async def server_side(
    args: argparse.Namespace,
    env: AppServer,
    policy: str,
    sides: dict[str, tuple[str, dict[str, Any]]],
) -> None:
    """A handler against its environment server `env`, beside its native twin (first side)."""
    async with service(policy) as client:
        env_before = cpu_seconds(env.process.pid)
        ms = await compare(client, args, sides, own_cpu)
        env_ms = (cpu_seconds(env.process.pid) - env_before) * 1000
    native, adapter = list(sides)
    verdict(native, adapter, ms)
    rollouts = (args.rounds * args.rollouts) + 16
    print(f"  the environment server's own CPU: {env_ms / rollouts:.1f} ms per rollout")


async def main_async(args: argparse.Namespace) -> None:
    print(f"{os.cpu_count()} cores; {args.rollouts} rollouts x {args.rounds} rounds per side")
    if args.only in (None, "verifiers"):
        await verifiers_side(args)
    if args.only in (None, "verifiers_legacy"):
        await verifiers_side(args, legacy=True)
    if args.only in (None, "openenv"):
        print("openenv: openenv-core's server on loopback")
        async with guess_server() as env:
            openenv = {"server": {"url": env.url}, "reset": {"target": TARGET}}
            sides = {"native_guess": ("native_guess", {}), "openenv": ("openenv", openenv)}
            await server_side(args, env, "openenv_guess", sides)
    if args.only in (None, "openreward"):
        print("openreward: openreward's environment server on loopback")
        async with openreward_server() as env:
            task = {"target": TARGET}
            ors = {"server": {"url": env.url}, "environment": "guessgame", "task_spec": task}
            sides = {
                "native_ors_guess": ("native_ors_guess", {}),
                "openreward": ("openreward", ors),
            }
            await server_side(args, env, "openreward_guess", sides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", choices=["verifiers", "verifiers_legacy", "openenv", "openreward"]
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
