"""In-sandbox action server (bash over a pty, IPython, file tools) and its host-side client.

Only light modules are imported here: the server's ready path goes through this package, and
jupyter_client is imported by the Python tool on its first call.
"""

from agentroll.runtime.action.client import ActionClient
from agentroll.runtime.action.errors import (
    ActionError,
    ActionProtocolError,
    ActionRequestError,
    ActionServerUnavailable,
    ActionTimeout,
)
from agentroll.runtime.action.protocol import BashResult, EditorResult, PythonResult

__all__ = [
    "ActionClient",
    "ActionError",
    "ActionProtocolError",
    "ActionRequestError",
    "ActionServerUnavailable",
    "ActionTimeout",
    "BashResult",
    "EditorResult",
    "PythonResult",
]
