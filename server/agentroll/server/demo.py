"""`agentroll demo`: the whole loop on one machine, no GPU, with every built-in task family.

Starts the scripted vLLM-protocol backend (whose scripted policies use the tools: they
explore, edit, run tests and submit, wrong at a seeded rate) and an agentroll server
in-process on free loopback ports, registers the backend like a trainer would, and submits
a mixed batch in GRPO-style groups: `swe` (bundled repositories with a real bug), `code`
(hidden unit tests), `math` with a Python tool, multiple-choice `stem`, and `solve_verify`, a
two-agent task (a trained solver and a frozen verifier, each on its own policy's backend: the
same scripted server registered twice). Sandboxes are bubblewrap. Without bubblewrap the
demo says so before it starts and runs only the families that need no sandbox (math without
its tool, stem, solve_verify), never a policy's commands unisolated. It
follows the results cursor with a progress bar, then prints a summary per task family (reward
is `-` where no rollout earned one), the errors by type with an example, and one SWE
trajectory: its turns, tool calls, diff and the tests that decided its reward, and the
two-agent episodes' traces per agent.

`engine="vllm-cpu"` (`agentroll demo --engine vllm-cpu`) runs the same jobs against vLLM's
CPU build serving a tiny random-weight model instead (set up by code and cached:
docs/engine.md). Real tokens, real logprobs; the model samples noise, so rewards are low.
"""

import asyncio
import faulthandler
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentroll.handlers.builtin.code import load_code_tasks
from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.handlers.builtin.stem import load_stem_tasks
from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.runtime import BwrapConfig
from agentroll.server.api import create_app
from agentroll.server.engine import VLLMServer
from agentroll.server.schema import AgentSpec, JobRequest, SamplingParams, Trajectory
from agentroll.server.schema.auth import default_token_file
from agentroll.server.serving import start_in_loop
from agentroll.server.settings import Settings
from agentroll.server.ui.cli import login_url
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.tiny_model import prepare_tiny_engine
from agentroll.trainer_clients import AsyncRolloutClient

RESULT_TIMEOUT_S = 600.0
SHUTDOWN_LIMIT_S = 120.0
"""After Ctrl-C, what the servers' shutdown may take (each stop is bounded at 40 s) before the
demo dumps every thread's stack to stderr and exits 1 rather than hang."""


@dataclass
class DemoRun:
    keep_serving: bool = False
    """After the summary, serve on (the viewer, the API) until Ctrl-C."""
    status: int | None = None
    """The demo's exit status, once its rollouts are summed up."""


Engine = Literal["scripted", "vllm-cpu"]
FAMILIES = ("swe", "code", "math", "stem", "solve_verify")
NEEDS_SANDBOX = ("swe", "code")
POLICY = "echo,swe,code,stem,verify,math"
AGENTS = {
    "solve_verify": {
        "solver": AgentSpec(policy="default"),
        "verifier": AgentSpec(policy="verifier", trainable=False),
    }
}
"""The agents each multi-agent family's jobs declare."""


def _instances(sandboxes: bool) -> dict[str, Callable[[int], dict[str, Any]]]:
    swe, code = load_swe_tasks(), load_code_tasks()
    math, stem = load_math_tasks(), load_stem_tasks()
    return {
        "swe": lambda i: swe[i % len(swe)].instance,
        "code": lambda i: code[i % len(code)].instance(),
        "math": lambda i: math[i % len(math)].instance(tools=sandboxes),
        "stem": lambda i: stem[i % len(stem)].instance(),
        "solve_verify": lambda i: math[(i + 1) % len(math)].instance(),
    }


def plan_families(has_bwrap: bool) -> tuple[str, ...]:
    """The families this machine can run honestly; says up front what it cannot, and why."""
    if has_bwrap:
        return FAMILIES
    print(
        "bubblewrap (bwrap) is not installed, so this demo cannot run the task families that\n"
        f"need an isolated sandbox: {', '.join(NEEDS_SANDBOX)}. It runs "
        f"{', '.join(f for f in FAMILIES if f not in NEEDS_SANDBOX)} (math without its Python "
        "tool) instead.\nTo run them all: `sudo apt-get install bubblewrap` (Debian/Ubuntu; "
        "`make demo` in a checkout installs it).\n",
        file=sys.stderr,
    )
    return tuple(f for f in FAMILIES if f not in NEEDS_SANDBOX)


def _jobs(groups: int, group_size: int, families: tuple[str, ...]) -> list[JobRequest]:
    make = _instances(sandboxes=set(NEEDS_SANDBOX) <= set(families))
    out = []
    for g in range(groups):
        family = families[g % len(families)]
        instance = make[family](g // len(FAMILIES))
        group_id = f"{family}-{instance.get('instance_id') or instance.get('id')}-g{g}"
        for k in range(group_size):
            out.append(
                JobRequest(
                    job_id=f"{group_id}-s{k}",
                    handler=family,
                    instance=instance,
                    group_id=group_id,
                    agents=AGENTS.get(family),
                    sampling=SamplingParams(temperature=1.0, max_tokens=1024, seed=1000 * g + k),
                )
            )
    return out


def _progress(
    results: list[Trajectory], total: int, started: float, families: tuple[str, ...]
) -> None:
    done = len(results)
    width = 30
    filled = width * done // max(total, 1)
    by_family = Counter(t.handler for t in results)
    counts = " ".join(f"{f}:{by_family.get(f, 0)}" for f in families)
    rewards = [t.reward for t in results if t.reward is not None]
    line = (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {counts}"
        f"  mean reward {_reward_cell(rewards).strip()}  {time.monotonic() - started:5.1f}s"
    )
    if sys.stderr.isatty():
        print(line, end="", file=sys.stderr, flush=True)
    elif done == total or done % max(1, total // 10) == 0:
        print(line.strip(), file=sys.stderr, flush=True)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _turns(t: Trajectory) -> int:
    """Assistant turns of the rollout, every agent's together."""
    return t.num_turns + sum(a.num_turns for a in t.agents or [])


def _reward_cell(rewards: list[float]) -> str:
    """Mean reward, or `-` where no rollout earned one (an infra_error has no reward)."""
    return f"{statistics.fmean(rewards):>6.2f}" if rewards else f"{'-':>6}"


def error_summary(results: list[Trajectory]) -> list[str]:
    """One line per error type: how many rollouts ended with it, and one example message."""
    by_type: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in results:
        if t.error is not None:
            by_type[(t.outcome.value, t.error.type)].append(t)
    lines = []
    for (outcome, kind), group in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        example = " ".join(group[0].error.message.split())[:160] if group[0].error else ""
        lines.append(f"  {outcome:<11} {kind:<28} x{len(group):<4} e.g. {example}")
    return lines


def _summary(results: list[Trajectory], families: tuple[str, ...]) -> None:
    by_family: dict[str, list[Trajectory]] = defaultdict(list)
    for t in results:
        by_family[t.handler].append(t)
    header = (
        f"{'family':<12} {'n':>3} {'reward':>6} {'outcomes':<22} {'turns':>5} {'init s':>6} "
        f"{'run s':>6} {'eval s':>6} {'llm s':>6} {'tools/ro':>8} {'ms/tool':>7}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    for family in families:
        group = by_family.get(family, [])
        if not group:
            continue
        rewards = [t.reward for t in group if t.reward is not None]
        outcomes = ",".join(
            f"{k}:{v}" for k, v in sorted(Counter(t.outcome.value for t in group).items())
        )
        calls = sum(t.timing.tool_calls for t in group)
        tool_ms = 1000 * sum(t.timing.tool_s for t in group) / calls if calls else 0.0

        def stage(name: str, ts: list[Trajectory] = group) -> float:
            return _mean([getattr(t.timing, name).work_s for t in ts if getattr(t.timing, name)])

        print(
            f"{family:<12} {len(group):>3} {_reward_cell(rewards)} {outcomes:<22} "
            f"{_mean([_turns(t) for t in group]):>5.1f} {stage('init'):>6.2f} "
            f"{stage('run'):>6.2f} {stage('eval'):>6.2f} "
            f"{_mean([t.timing.llm_s for t in group]):>6.2f} {calls / len(group):>8.1f} "
            f"{tool_ms:>7.0f}"
        )
    print(
        "(reward: mean over the rollouts that earned one; init/run/eval: mean work seconds per "
        "stage; tools/ro: tool calls per rollout; ms/tool: mean tool-call latency)"
    )
    errors = error_summary(results)
    if errors:
        print("\nerrors by type (outcome, type, count, example):", *errors, sep="\n")


def _swe_excerpt(results: list[Trajectory]) -> None:
    swe = sorted((t for t in results if t.handler == "swe"), key=lambda t: -(t.reward or 0))
    if not swe:
        return
    t = swe[0]
    print(
        f"\nSWE trajectory {t.job_id}: reward {t.reward}, outcome {t.outcome.value}, "
        f"{t.num_turns} turns, finish {t.finish_reason}, {len(t.prompt_ids)} prompt + "
        f"{len(t.response_ids)} response tokens ({sum(t.response_mask)} sampled)"
    )
    for m in t.messages[2:]:
        text = str(m.get("content", "")).strip().replace("\n", "\n        ")
        if len(text) > 400:
            text = text[:400] + " [...]"
        print(f"  {m['role']:>9}: {text}")
    print("\n  patch (artifact `patch`):")
    for line in t.artifacts.get("patch", "").splitlines():
        print(f"    {line}")
    info = t.reward_info
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if isinstance(info.get(key), dict):
            ok, bad = len(info[key]["success"]), len(info[key]["failure"])
            print(f"  {key}: {ok} passed, {bad} failed")


def _agents_summary(results: list[Trajectory]) -> None:
    """Per agent of the multi-agent episodes: its policy, whether it is trained, its reward."""
    traces = [a for t in results for a in t.agents or []]
    if not traces:
        return
    print("\nagents of the two-agent episodes (each trace exact for its own policy):")
    for name in dict.fromkeys(a.name for a in traces):
        mine = [a for a in traces if a.name == name]
        rewards = [a.reward for a in mine if a.reward is not None]
        trained = "trained" if mine[0].trainable else "frozen"
        print(
            f"  {name:<10} policy {mine[0].policy:<9} {trained:<7} {len(mine):>3} traces  "
            f"reward {_reward_cell(rewards).strip():>5}  "
            f"turns {_mean([a.num_turns for a in mine]):.1f}  "
            f"sampled tokens {sum(sum(a.response_mask) for a in mine)}"
        )


@asynccontextmanager
async def _backend(
    engine: Engine, latency_s: float, workdir: Path
) -> AsyncIterator[tuple[str, str]]:
    """The LLM server the demo's rollouts sample from; yields its URL and a backend name."""
    if engine == "vllm-cpu":
        print("setting up vLLM's CPU build and the tiny model (cached after the first run)...")
        environment, model = await prepare_tiny_engine()
        async with VLLMServer(environment.python, model, workdir / "vllm.log") as server:
            print(
                f"vLLM {environment.root.name} serving a tiny random-weight model at "
                f"{server.url} (started in {server.start_seconds:.0f} s; its rollouts earn "
                "little reward: it samples noise)"
            )
            yield server.url, "vllm-cpu"
        return
    scripted = await start_in_loop(
        create_scripted_app(
            ScriptedLLMConfig(policy=POLICY, latency_s=latency_s, seed=7, max_model_len=32768)
        )
    )
    print(f"scripted vLLM backend at {scripted.url}")
    try:
        yield scripted.url, "scripted"
    finally:
        await scripted.stop()


async def _run(
    groups: int, group_size: int, latency_s: float, workdir: Path, engine: Engine, run: DemoRun
) -> int:
    async with _backend(engine, latency_s, workdir) as (url, name):
        return await _run_against(groups, group_size, url, name, workdir, run)


def workdir_settings(workdir: Path, **overrides: Any) -> Settings:
    """An in-process server's settings with all its state in `workdir`: its database and a
    token generated there (whatever the environment configures), bubblewrap sandboxes."""
    db_path = workdir / "agentroll.db"
    return Settings(
        db_path=db_path,
        api_token=None,
        admin_token=None,
        token_file=default_token_file(db_path),
        sandbox=BwrapConfig(),
        **overrides,
    )


async def _run_against(
    groups: int,
    group_size: int,
    backend_url: str,
    backend_name: str,
    workdir: Path,
    run: DemoRun | None = None,
) -> int:
    families = plan_families(shutil.which("bwrap") is not None)
    settings = workdir_settings(workdir)
    token_file = settings.token_file
    server = await start_in_loop(create_app(settings))
    print(f"agentroll server at {server.url}")
    try:
        # Like any client on this machine: the token the server generated in its state dir.
        async with AsyncRolloutClient(server.url, token_file=token_file) as client:
            await client.add_backend({"id": f"{backend_name}-0", "base_url": backend_url})
            # The verifier's policy: here the same LLM server, as its own backend.
            verifier = {
                "id": f"{backend_name}-verifier",
                "base_url": backend_url,
                "policy": "verifier",
            }
            await client.add_backend(verifier)
            jobs = _jobs(groups, group_size, families)
            print(
                f"submitting {len(jobs)} rollouts: {groups} groups of {group_size} over "
                f"{', '.join(families)}"
            )
            started = time.monotonic()
            await client.submit(jobs)
            results: list[Trajectory] = []
            async with asyncio.timeout(RESULT_TIMEOUT_S):
                async for trajectory in client.iter_results(wait=5.0):
                    results.append(trajectory)
                    _progress(results, len(jobs), started, families)
                    if len(results) == len(jobs):
                        break
            elapsed = time.monotonic() - started
        print()
        _summary(results, families)
        print(
            f"\n{len(results)} rollouts in {elapsed:.1f}s "
            f"({60 * len(results) / elapsed:.0f}/min), outcomes "
            f"{dict(Counter(t.outcome.value for t in results))}"
        )
        _swe_excerpt(results)
        _agents_summary(results)
        status = 0 if all(t.outcome.value in ("ok", "agent_error") for t in results) else 1
        assert server.token is not None  # an agentroll app always has one
        print(f"\nviewer: {login_url(server.url, server.token)}")
        run = run or DemoRun()
        run.status = status
        if not run.keep_serving:
            print("(the demo server stops now: `agentroll demo --keep-serving` keeps it up)")
            return status
        print("serving the viewer and the API until Ctrl-C", flush=True)
        try:
            await asyncio.Event().wait()  # by design only Ctrl-C ends it (cancelling this task)
        finally:
            faulthandler.dump_traceback_later(SHUTDOWN_LIMIT_S, exit=True)
        return status
    finally:
        await server.stop()


def run_demo(
    groups: int = 12,
    group_size: int = 4,
    latency_s: float = 0.05,
    engine: Engine = "scripted",
    keep_serving: bool = False,
) -> int:
    """Runs the demo; with `keep_serving`, its servers stay up after the summary (the viewer's
    address is printed) until Ctrl-C, and the demo's own status is still what it returns."""
    run = DemoRun(keep_serving)
    if keep_serving and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background (`&`, nohup), its Ctrl-C signal comes ignored: nothing
        # would then end the servers it keeps up. asyncio.run takes SIGINT from here.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="agentroll-demo-") as workdir:
        try:
            return asyncio.run(_run(groups, group_size, latency_s, Path(workdir), engine, run))
        except KeyboardInterrupt:
            if run.status is None:  # interrupted before the rollouts were summed up
                raise
            return run.status
        finally:
            if keep_serving:  # its watchdog, armed at Ctrl-C (no one else's)
                faulthandler.cancel_dump_traceback_later()
