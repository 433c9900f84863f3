"""Handlers the fault tests steer from outside the server process.

`staged` holds each stage while a *gate file* named in the instance exists, so a test can
park hundreds of jobs in chosen states (queued, init, ready, run, eval) of a real server
process, kill or stop that process, and later release whatever was requeued. With
`"sandbox": true` the job holds a real bubblewrap sandbox from INIT on.
"""

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.runtime import SandboxSpec

GATE_POLL_S = 0.1
STAGED = "tests.integration.faults.fault_handlers:Staged"
VICTIM = "tests.integration.faults.fault_handlers:Victim"
ENV_PROBE = "tests.integration.faults.fault_handlers:EnvProbe"

# In-process servers only: tests wait on these to strike while a tool call is in flight.
STARTED: dict[str, asyncio.Event] = {}


def started(job_id: str) -> asyncio.Event:
    return STARTED.setdefault(job_id, asyncio.Event())


_GATES: dict[str, asyncio.Event] = {}
_WATCHERS: set["asyncio.Task[None]"] = set()


async def _watch(gate: Path, opened: asyncio.Event) -> None:
    while await asyncio.to_thread(gate.exists):
        await asyncio.sleep(GATE_POLL_S)
    opened.set()


def _gate_opened(gate: str) -> asyncio.Event:
    """One watcher per gate file and process, however many jobs wait on it."""
    opened = _GATES.get(gate)
    if opened is None:
        opened = _GATES[gate] = asyncio.Event()
        task = asyncio.create_task(_watch(Path(gate), opened))
        _WATCHERS.add(task)
        task.add_done_callback(_WATCHERS.discard)
    return opened


async def _hold(ctx: RolloutContext, stage: str) -> None:
    inst: dict[str, Any] = dict(ctx.instance)
    if stage in inst.get("hold", ()):
        await _gate_opened(inst["gate"]).wait()
    await asyncio.sleep(float(inst.get(f"{stage}_s", 0)))


class Staged(AgentHandler):
    """Instance: `hold` (stages to hold while `gate` exists), `<stage>_s` sleeps, `sandbox`,
    `pad` (bytes of artifact text, to make results big)."""

    name: ClassVar[str] = "staged"

    async def init(self, ctx: RolloutContext) -> None:
        if ctx.instance.get("sandbox"):
            await ctx.open_sandbox(SandboxSpec(label=ctx.job_id))
        await _hold(ctx, "init")

    async def run(self, ctx: RolloutContext) -> None:
        if ctx.sandbox is not None:
            out = await ctx.sandbox.tools.bash("echo in-sandbox", timeout=60)
            ctx.state["observation"] = out.output.strip()
        await _hold(ctx, "run")

    async def eval(self, ctx: RolloutContext) -> Reward:
        await _hold(ctx, "eval")
        return Reward(1.0, {"observation": ctx.state.get("observation")})

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        pad = int(ctx.instance.get("pad", 0))
        return {"artifacts": {"pad": "x" * pad}} if pad else {}


class Victim(AgentHandler):
    """A sandboxed rollout that a test breaks mid-flight, as `instance["strike"]` says:
    - `tool`: RUN's tool call runs until the test kills the sandbox from outside;
    - `action_server`: the agent's command tries to kill the action server (its shell's parent);
    - `eval_raise`: the reward code itself crashes."""

    name: ClassVar[str] = "victim"

    async def init(self, ctx: RolloutContext) -> None:
        await ctx.open_sandbox(SandboxSpec(label=ctx.job_id))

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        strike = ctx.instance["strike"]
        if strike == "tool":
            started(ctx.job_id).set()
            await ctx.sandbox.tools.bash("sleep 300", timeout=600)
        elif strike == "action_server":
            await ctx.sandbox.tools.bash("kill -9 $PPID; sleep 5", timeout=60)
            await ctx.sandbox.tools.bash("echo after", timeout=60)

    async def eval(self, ctx: RolloutContext) -> Reward:
        if ctx.instance["strike"] == "eval_raise":
            raise ZeroDivisionError("reward code crashed")
        return Reward(1.0)


class EnvProbe(AgentHandler):
    """Reads its environment inside the sandbox every way a tool can."""

    name: ClassVar[str] = "env-probe"

    async def init(self, ctx: RolloutContext) -> None:
        await ctx.open_sandbox(SandboxSpec(label=ctx.job_id))

    async def run(self, ctx: RolloutContext) -> None:
        sb = ctx.sandbox
        assert sb is not None
        reads = {
            "bash_env": (await sb.tools.bash("env", timeout=30)).output,
            "bash_environ": (
                await sb.tools.bash(
                    "cat /proc/self/environ /proc/$$/environ | tr '\\0' '\\n'", timeout=30
                )
            ).output,
            "exec_env": (await sb.exec(["env"], timeout=30)).stdout,
            "all_environs": (
                await sb.exec(
                    ["sh", "-c", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"],
                    timeout=30,
                )
            ).stdout,
            "python_env": (
                await sb.tools.python("import os; print(dict(os.environ))", timeout=60)
            ).output,
        }
        ctx.state["reads"] = reads

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        return {"artifacts": ctx.state.get("reads", {})}


def fault_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    for cls in (Staged, Victim, EnvProbe):
        registry.register(cls)
    return registry


def staged_job(job_id: str, **instance: Any) -> dict[str, Any]:
    return {"job_id": job_id, "handler": STAGED, "instance": instance}
