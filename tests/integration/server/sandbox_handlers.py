"""Handlers that use real sandboxes through `RolloutContext.open_sandbox`."""

import asyncio
from pathlib import Path
from typing import ClassVar, Literal

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.handlers.agent import ToolAgentHandler
from agentroll.runtime import SandboxSpec


class Writer(AgentHandler):
    """RUN writes a file with the bash tool; EVAL looks for it with a direct exec."""

    name: ClassVar[str] = "writer"

    async def init(self, ctx: RolloutContext) -> None:
        sandbox = await ctx.open_sandbox()
        ctx.state["sandbox_id"] = sandbox.id

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        result = await ctx.sandbox.tools.bash("echo made-in-run > out.txt && cat out.txt")
        ctx.state["observation"] = result.output

    async def eval(self, ctx: RolloutContext) -> Reward:
        sandbox = ctx.sandbox or await ctx.open_sandbox()
        found = await sandbox.exec(["cat", "out.txt"], timeout=10)
        info = {"sandbox_id": ctx.state["sandbox_id"], "eval_sandbox_id": sandbox.id}
        return Reward(float(found.exit_code == 0 and "made-in-run" in found.stdout), info)


class FreshEval(Writer):
    name: ClassVar[str] = "fresh-eval"
    eval_sandbox: ClassVar[Literal["reuse", "fresh"]] = "fresh"


class Sleeper(Writer):
    """Holds its sandbox busy in RUN (for cancellation and crash tests)."""

    name: ClassVar[str] = "sleeper"

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        await ctx.sandbox.tools.bash("sleep 300 & sleep 300", timeout=600)


class ForkBomb(Writer):
    """The policy's worst shell command; the rollout must survive it with an observation."""

    name: ClassVar[str] = "fork-bomb"

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        bomb = await ctx.sandbox.tools.bash("b() { b | b & }; b", timeout=5)
        after = await ctx.sandbox.tools.bash("echo still-here", timeout=30)
        ctx.state["observation"] = bomb.output
        ctx.state["after"] = after.output

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(float("still-here" in ctx.state["after"]), {"bomb": ctx.state["observation"]})


class Lingerer(Writer):
    """RUN leaves a process that keeps rewriting the file EVAL reads; `stop_agent_before_eval`
    is the instance's `stop` (default: the handler's default)."""

    name: ClassVar[str] = "lingerer"

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        # Written whole (rename), so a kill between truncating and writing cannot leave it empty.
        loop = "while true; do date +%s%N > out.tmp && mv out.tmp out.txt; sleep 0.01; done"
        await ctx.sandbox.tools.bash(
            f"nohup sh -c '{loop}' >/dev/null 2>&1 & sleep 0.3; test -s out.txt"
        )

    async def eval(self, ctx: RolloutContext) -> Reward:
        assert ctx.sandbox is not None
        first = await ctx.sandbox.exec(["cat", "out.txt"], timeout=10)
        # Watch for a while (a live writer, niced on a busy machine, may take its time).
        for _ in range(30):
            await asyncio.sleep(0.1)
            later = await ctx.sandbox.exec(["cat", "out.txt"], timeout=10)
            if later.stdout != first.stdout:
                break
        alive = await ctx.sandbox.exec(["sh", "-c", "ls /proc | grep -c '^[0-9]'"], timeout=10)
        info = {"processes": int(alive.stdout.strip() or 0), "read": [first.stdout, later.stdout]}
        return Reward(float(first.stdout == later.stdout and first.stdout != ""), info)


class LingererKept(Lingerer):
    name: ClassVar[str] = "lingerer-kept"
    stop_agent_before_eval: ClassVar[bool] = False


class WarmPython(ToolAgentHandler):
    """A tool-using handler with the python tool: is its kernel up before RUN's first call?"""

    name: ClassVar[str] = "warm-python"
    default_tools = ("python", "submit")

    def task_prompt(self, ctx: RolloutContext) -> str:
        return "unused"

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        ctx.state["alive"] = await ctx.sandbox.tools.alive()

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(float(ctx.state["alive"]["python"] is True))


class BadImage(Writer):
    name: ClassVar[str] = "bad-image"

    async def init(self, ctx: RolloutContext) -> None:
        await ctx.open_sandbox(SandboxSpec(image=Path("/nonexistent/rootfs")))


def sandbox_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    for cls in (Writer, FreshEval, Sleeper, ForkBomb, Lingerer, LingererKept, WarmPython, BadImage):
        registry.register(cls)
    return registry
