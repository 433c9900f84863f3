"""The errors of the action client, re-exported from `agentroll.runtime.errors` (their one home,
where the module docstring draws the whole tree)."""

from __future__ import annotations

from agentroll.runtime.errors import (
    ActionError,  # noqa: F401 (re-exported: its old import path)
    ActionProtocolError,  # noqa: F401 (re-exported: its old import path)
    ActionRequestError,  # noqa: F401 (re-exported: its old import path)
    ActionServerUnavailable,  # noqa: F401 (re-exported: its old import path)
    ActionTimeout,  # noqa: F401 (re-exported: its old import path)
)
