"""Handlers whose stages the tests steer: block on gates, sleep, fail in chosen ways."""

import asyncio
from collections import defaultdict
from typing import Any, ClassVar

from agentroll.handlers import (
    AgentError,
    AgentHandler,
    HandlerRegistry,
    InfraError,
    Reward,
    RolloutContext,
)


class Gates:
    """Per-stage gates: a stage named in the instance's `block` waits until its gate opens."""

    def __init__(self) -> None:
        self.open: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.entered: dict[str, list[str]] = defaultdict(list)
        self.cleaned: list[str] = []
        self.agent_time: dict[str, dict[str, float]] = defaultdict(dict)
        """Per job, `ctx.agent_time()` as each stage ended."""


def make_registry(gates: Gates) -> HandlerRegistry:
    class Steered(AgentHandler):
        name: ClassVar[str] = "steered"

        async def _stage(self, ctx: RolloutContext, stage: str) -> None:
            inst: dict[str, Any] = dict(ctx.instance)
            gates.entered[stage].append(ctx.job_id)
            try:
                if stage in inst.get("block", []):
                    await gates.open[stage].wait()
                await asyncio.sleep(float(inst.get(f"{stage}_s", 0)))
                gates.agent_time[ctx.job_id][stage] = ctx.agent_time()
                fail = inst.get("fail", {})
                if fail.get("stage") == stage:
                    kind = fail["kind"]
                    if kind == "agent":
                        raise AgentError("bad tool call", cause="bad_tool_call")
                    if kind == "infra":
                        raise InfraError("sandbox vanished", cause="sandbox_lost")
                    raise RuntimeError("handler bug")
            except asyncio.CancelledError:
                gates.cleaned.append(f"{ctx.job_id}:{stage}")
                raise

        async def init(self, ctx: RolloutContext) -> None:
            await self._stage(ctx, "init")

        async def run(self, ctx: RolloutContext) -> None:
            await self._stage(ctx, "run")

        async def eval(self, ctx: RolloutContext) -> Reward:
            await self._stage(ctx, "eval")
            return Reward(float(ctx.instance.get("reward", 1.0)), {"graded": True})

    registry = HandlerRegistry()
    registry.register(Steered)
    return registry


def job(job_id: str, group_id: str | None = None, **instance: Any) -> dict[str, Any]:
    return {"job_id": job_id, "handler": "steered", "instance": instance, "group_id": group_id}
