"""Errors raised by the runtime package: sandboxes, their action server, images. All of them
are defined here; `agentroll.runtime.action.errors` and `agentroll.runtime.images.errors`
re-export theirs, so those import paths keep working.

One root, each leaf also the builtin it specialises, so callers can catch either::

    AgentrollRuntimeError(Exception)
    ├── SandboxError                    a runtime or one of its sandboxes failed
    │   ├── RuntimeUnavailable(SandboxError, FileNotFoundError)  binary missing / local not enabled
    │   ├── SandboxStartError(SandboxError, RuntimeError)         sandbox or action server not up
    │   ├── SandboxTimeout(SandboxError, TimeoutError)            start ran past its limit
    │   ├── SandboxClosed(SandboxError, RuntimeError)             used after stop() or close()
    │   ├── ContainmentError(SandboxError, RuntimeError)          processes survived teardown
    │   └── AddressExhausted(SandboxError, OSError)               no free loopback address left
    ├── ActionError                     the action server's client failed
    │   ├── ActionServerUnavailable(ActionError, ConnectionError) unreachable, or connection died
    │   ├── ActionTimeout(ActionError, TimeoutError)              no reply within the call's budget
    │   ├── ActionProtocolError(ActionError, RuntimeError)        malformed or oversized frame
    │   └── ActionRequestError(ActionError, ValueError)           the server refused the request
    │       └── PathRefused                                       a path outside the allowed roots
    └── ImageError                      the image builder failed
        ├── TemplateNotFound(ImageError, LookupError)             unknown template name or path
        ├── TemplateError(ImageError, ValueError)                 bad parameter, render or recipe
        ├── BuilderUnavailable(ImageError, FileNotFoundError)     mmdebstrap/apptainer missing
        ├── BaseImageMissing(ImageError, LookupError)             a FROM image is not stored
        ├── BuildFailed(ImageError, RuntimeError)                 the build tool exited non-zero
        └── BuildTimeout(ImageError, TimeoutError)                build or cache lock ran too long

Only infrastructure failures are action exceptions: anything the agent caused (a command that
exits non-zero, a path outside the allowed roots, a non-unique ``str_replace``) comes back as
a normal result with a readable message. Third-party and subprocess failures are translated
at the boundary with ``raise ... from exc``. Import-light (the in-sandbox action server
imports it): the standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


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


class ImageError(AgentrollRuntimeError):
    """Root of every image-builder error."""


class TemplateNotFound(ImageError, LookupError):
    """No template of that name (or at that path) exists for the requested format."""


class TemplateError(ImageError, ValueError):
    """A template parameter, the rendering, or the rendered recipe is invalid."""


class BuilderUnavailable(ImageError, FileNotFoundError):
    """The external build tool is not installed on this machine."""


class BaseImageMissing(ImageError, LookupError):
    """A Dockerfile names a base image the local OCI store lacks, and pulling is off."""


class BuildFailed(ImageError, RuntimeError):
    """The build tool failed; the log file holds its output."""

    def __init__(self, message: str, *, log_path: Path | None = None) -> None:
        super().__init__(message if log_path is None else f"{message} (log: {log_path})")
        self.log_path = log_path


class BuildTimeout(ImageError, TimeoutError):
    """A build (or the wait for a concurrent build of the same image) ran past its limit."""


class PathRefused(ActionRequestError):
    """A path outside the allowed roots (or otherwise unusable)."""
