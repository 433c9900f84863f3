"""The `openenv` family: OpenEnv environment servers, driven over their WebSocket protocol,
one session per job (`handler`)."""

from agentroll.handlers.builtin.openenv.handler import (
    SYSTEM_PROMPT,
    OpenEnvHandler,
    OpenEnvInstance,
)

HANDLERS = {"openenv": "OpenEnvHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["SYSTEM_PROMPT", "OpenEnvHandler", "OpenEnvInstance"]
