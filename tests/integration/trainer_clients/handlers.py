"""A handler the collector tests steer per sample, through the deterministic job ids.

Instance fields (sample k is parsed from `<group>-s<k>-r<attempt>`):
  rewards:      list, reward of sample k (default 1.0)
  fail:         {"<job id>": "infra"}          fail exactly that attempt
  fail_samples: [k, ...]                       fail every attempt of sample k (infra)
  sleep:        {"<k>": seconds}               sample k takes that long in RUN
  generate:     true                           sample one turn from the registered LLM
  hold_s:       seconds                        after generating, wait (a weight update lands)
  mask:         ["<job id>", ...]              its verifier said: do not train on it
  components:   {"<name>": [value of sample k]} named reward components beside the reward
"""

import asyncio
import re
from typing import Any, ClassVar

from agentroll.handlers import AgentHandler, HandlerRegistry, InfraError, Reward, RolloutContext

SAMPLE = re.compile(r"-s(\d+)-r(\d+)$")


def sample_of(job_id: str) -> int:
    found = SAMPLE.search(job_id)
    return int(found.group(1)) if found else 0


class Steered(AgentHandler):
    name: ClassVar[str] = "steered"

    async def run(self, ctx: RolloutContext) -> None:
        inst: dict[str, Any] = dict(ctx.instance)
        k = sample_of(ctx.job_id)
        if inst.get("fail", {}).get(ctx.job_id) == "infra" or k in inst.get("fail_samples", []):
            raise InfraError("sandbox vanished", cause="sandbox_lost")
        await asyncio.sleep(float(inst.get("sleep", {}).get(str(k), 0.0)))
        if inst.get("generate"):
            await ctx.llm.start([{"role": "user", "content": "Repeat after me: ok"}])
            await ctx.llm.generate()
            await asyncio.sleep(float(inst.get("hold_s", 0.0)))

    async def eval(self, ctx: RolloutContext) -> Reward:
        rewards = list(ctx.instance.get("rewards", []))
        k = sample_of(ctx.job_id)
        components = {name: float(v[k]) for name, v in ctx.instance.get("components", {}).items()}
        return Reward(float(rewards[k]) if k < len(rewards) else 1.0, components=components)

    def final_result(self, ctx: RolloutContext) -> dict[str, Any]:
        if ctx.job_id in ctx.instance.get("mask", []):
            return {"metadata": {"mask_sample": True}}
        return {}


def registry() -> HandlerRegistry:
    reg = HandlerRegistry()
    reg.register(Steered)
    return reg


HANDLER_PATH = "tests.integration.trainer_clients.handlers:Steered"
