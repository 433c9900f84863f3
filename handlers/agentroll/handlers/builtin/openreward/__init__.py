"""The `openreward` family: Open Reward Standard environments, driven over their HTTP/SSE
protocol (`wire`), one session per job (`handler`)."""

from agentroll.handlers.builtin.openreward.handler import OpenRewardHandler, OpenRewardInstance

HANDLERS = {"openreward": "OpenRewardHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["OpenRewardHandler", "OpenRewardInstance"]
