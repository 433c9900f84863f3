"""A real Open Reward Standard environment server for tests: openreward's own environment
server, serving the guessing game and quiz of `guess_env.py`, in a virtual environment of its
own (`server.py`)."""

from agentroll.testing.openreward.server import openreward_python, openreward_server

__all__ = ["openreward_python", "openreward_server"]
