"""A real OpenEnv environment server for tests: openenv-core's own server, serving the
guessing game of `guess_env.py` (or, as one MCP tool, of `guess_mcp_env.py`), in a virtual
environment of its own (`server.py`); and a scripted session endpoint in the test's own
process, for the answers that server never sends (`scripted_env.py`)."""

from agentroll.testing.openenv.scripted_env import StepScript, scripted_env
from agentroll.testing.openenv.server import (
    GuessServer,
    guess_mcp_server,
    guess_server,
    openenv_python,
)

__all__ = [
    "GuessServer",
    "StepScript",
    "guess_mcp_server",
    "guess_server",
    "openenv_python",
    "scripted_env",
]
