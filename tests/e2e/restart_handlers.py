"""A handler whose rollout kills the server running it, as a job that crashes its server does."""

import asyncio
import os
import signal
from typing import ClassVar

from agentroll.handlers import AgentHandler, Reward, RolloutContext


class ServerKiller(AgentHandler):
    """INIT SIGKILLs the server process (after a moment, so the server is listening and its
    client sees it die rather than fail to start)."""

    name: ClassVar[str] = "server_killer"

    async def init(self, ctx: RolloutContext) -> None:
        await asyncio.sleep(float(ctx.instance.get("after_s", 1.0)))
        os.kill(os.getpid(), signal.SIGKILL)

    async def run(self, ctx: RolloutContext) -> None:
        raise AssertionError("never reached: INIT kills the server")

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(0.0)
