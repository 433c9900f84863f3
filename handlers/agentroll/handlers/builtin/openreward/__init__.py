"""The `openreward` family: Open Reward Standard environments, driven over their HTTP/SSE
protocol (`wire`), one session per job (`handler`)."""

from agentroll.handlers.builtin.openreward.handler import OpenRewardHandler, OpenRewardInstance

__all__ = ["OpenRewardHandler", "OpenRewardInstance"]
