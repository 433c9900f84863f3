"""Errors raised by the action client (and the request refusals the server sends back).

Only infrastructure failures are exceptions. Anything the agent caused -- a command that exits
non-zero, a Python exception, a path outside the allowed roots, a non-unique ``str_replace`` --
comes back as a normal result with a readable message.

The root of the runtime package's errors is ``AgentrollRuntimeError`` (runtime/errors.py)::

    ActionError(AgentrollRuntimeError)
    ├── ActionServerUnavailable(ActionError, ConnectionError)  unreachable, or the connection died
    ├── ActionTimeout(ActionError, TimeoutError)               no reply within the call's budget
    ├── ActionProtocolError(ActionError, RuntimeError)         malformed or oversized frame
    └── ActionRequestError(ActionError, ValueError)            the server refused the request
                                                               (unknown op, bad arguments, an
                                                               upload/download it cannot serve)
"""

from __future__ import annotations

from agentroll.runtime.errors import AgentrollRuntimeError


class ActionError(AgentrollRuntimeError):
    """Root of every error the action client raises."""


class ActionServerUnavailable(ActionError, ConnectionError):
    """The action server cannot be reached, or the connection to it was lost."""


class ActionTimeout(ActionError, TimeoutError):
    """The action server did not answer within the call's timeout plus margin."""


class ActionProtocolError(ActionError, RuntimeError):
    """A frame was malformed, oversized or answered something that was not asked."""


class ActionRequestError(ActionError, ValueError):
    """The server refused the request (bad arguments, or an upload/download it cannot serve)."""
