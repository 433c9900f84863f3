"""Harbor and Terminal-Bench task folders: read (`task`), fetched (`source`), verified
(`verify`), run by the `harbor` handler (`handler`)."""

from agentroll.handlers.builtin.harbor.handler import HarborHandler

HANDLERS = {"harbor": "HarborHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["HarborHandler"]
