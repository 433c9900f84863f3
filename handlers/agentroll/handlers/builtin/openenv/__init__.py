"""The `openenv` family: OpenEnv environment servers, driven over their WebSocket protocol,
one session per job (`handler`)."""

from agentroll.handlers.builtin.openenv.handler import (
    SYSTEM_PROMPT,
    OpenEnvHandler,
    OpenEnvInstance,
)

__all__ = ["SYSTEM_PROMPT", "OpenEnvHandler", "OpenEnvInstance"]
