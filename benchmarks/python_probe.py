"""A probe rollout for `saturation.py`: its python calls, first and later, timed in RUN.

The server resolves it by its `module:Class` name (`python_probe:PythonProbe`; `saturation.py`
puts this folder on the server's PYTHONPATH). INIT is the tool-using handlers' own (a sandbox,
the python tool warmed while the task is prepared); RUN makes `CALLS` python calls, a
simulated LLM turn apart, through the same action server the agent loop uses; EVAL reports
each call's latency in `reward_info["python_ms"]`. So the first call is compared with later
ones of the same rollout, under the same load, on the same path.
"""

import asyncio
import time
from typing import ClassVar

from agentroll.handlers import Reward, RolloutContext
from agentroll.handlers.agent import ToolAgentHandler

CALLS = 4
CELL = "print(sum(range(1, 21)))"
TURN_S = 0.2
"""The pause between two calls, standing for an LLM turn."""


class PythonProbe(ToolAgentHandler):
    name: ClassVar[str] = "python-probe"
    default_tools = ("python", "submit")

    def task_prompt(self, ctx: RolloutContext) -> str:
        return "unused: RUN makes its calls itself"

    async def run(self, ctx: RolloutContext) -> None:
        assert ctx.sandbox is not None
        took = []
        for _ in range(CALLS):
            await asyncio.sleep(TURN_S)
            began = time.monotonic()
            result = await ctx.sandbox.tools.python(CELL, timeout=60)
            took.append(1000 * (time.monotonic() - began))
            if result.output != "210\n":
                raise RuntimeError(f"the probe's cell answered {result.output!r}")
        ctx.state["python_ms"] = took

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0, {"python_ms": ctx.state["python_ms"]})
