"""Errors raised by the runtime package: sandboxes, their action server, images.

One root, each leaf also the builtin it specialises, so callers can catch either::

    AgentrollRuntimeError(Exception)
    ├── SandboxError                    a runtime or one of its sandboxes failed
    │   ├── RuntimeUnavailable(SandboxError, FileNotFoundError)  binary missing / local not enabled
    │   ├── SandboxStartError(SandboxError, RuntimeError)         sandbox or action server not up
    │   ├── SandboxTimeout(SandboxError, TimeoutError)            start ran past its limit
    │   ├── SandboxClosed(SandboxError, RuntimeError)             used after stop() or close()
    │   ├── ContainmentError(SandboxError, RuntimeError)          processes survived teardown
    │   └── AddressExhausted(SandboxError, OSError)               no free loopback address left
    ├── ActionError                     the action server's client failed (action/errors.py)
    │   ├── ActionServerUnavailable(ActionError, ConnectionError)
    │   ├── ActionTimeout(ActionError, TimeoutError)
    │   ├── ActionProtocolError(ActionError, RuntimeError)
    │   └── ActionRequestError(ActionError, ValueError)
    └── ImageError                      the image builder failed (images/errors.py)
        ├── TemplateNotFound(ImageError, LookupError)
        ├── TemplateError(ImageError, ValueError)
        ├── BuilderUnavailable(ImageError, FileNotFoundError)
        ├── BuildFailed(ImageError, RuntimeError)
        └── BuildTimeout(ImageError, TimeoutError)

Third-party and subprocess failures are translated at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class AgentrollRuntimeError(Exception):
    """Root of every error the runtime package raises (sandboxes, action server, images)."""


class SandboxError(AgentrollRuntimeError):
    """Root of the errors of runtimes and their sandboxes."""


class RuntimeUnavailable(SandboxError, FileNotFoundError):
    """The backend cannot run on this machine (binary missing, or not explicitly enabled)."""


class SandboxStartError(SandboxError, RuntimeError):
    """The sandbox process or its action server failed to come up."""


class SandboxTimeout(SandboxError, TimeoutError):
    """A start, exec or stop did not finish within its timeout."""


class SandboxClosed(SandboxError, RuntimeError):
    """The sandbox was already stopped (or its runtime closed)."""


class ContainmentError(SandboxError, RuntimeError):
    """Teardown could not prove that every process of the sandbox is gone."""

    def __init__(self, sandbox_id: str, survivors: list[int]) -> None:
        super().__init__(f"sandbox {sandbox_id}: processes survived teardown: {survivors}")
        self.sandbox_id = sandbox_id
        self.survivors = survivors


class AddressExhausted(SandboxError, OSError):
    """Every loopback address in the configured range is owned by a live sandbox."""
