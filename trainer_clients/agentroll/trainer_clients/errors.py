"""Errors raised by the trainer clients.

One root, each leaf also the builtin it specialises, so callers can catch either::

    ClientError(Exception)
    ├── ApiError(ClientError)                          the server answered with its error envelope
    │   ├── NotFound(ApiError, LookupError)            404
    │   ├── Conflict(ApiError, ValueError)             409: job id reused for another request
    │   └── InvalidRequest(ApiError, ValueError)       400 / 413 / 422
    ├── ServerUnavailable(ClientError, ConnectionError) no answer, or 503
    │   └── NoServerAvailable(ServerUnavailable)       every server of a pool is dead
    └── FanOutError(ClientError)                       a call sent to every server failed on some

Outside the tree stay the builtins for the caller's own mistakes and waits: `ValueError` for
arguments a call cannot use, `RuntimeError` for a collector used before it is started,
`TimeoutError` for a wait (for results, groups or the pool's loop thread) that ran out.
"""

from typing import Any


class ClientError(Exception):
    """Root of every error the trainer clients raise."""


class ApiError(ClientError):
    """The server refused the call: `status`, envelope `type`, `message` and `detail`."""

    def __init__(self, status: int, type_: str, message: str, detail: Any = None) -> None:
        super().__init__(f"{status} {type_}: {message}")
        self.status = status
        self.type = type_
        self.message = message
        self.detail = detail


class NotFound(ApiError, LookupError):
    """404: no such job or backend."""


class Conflict(ApiError, ValueError):
    """409: the job id is already taken by a different request."""


class InvalidRequest(ApiError, ValueError):
    """400 / 413 / 422: the request is malformed, too large or names what does not exist."""


class ServerUnavailable(ClientError, ConnectionError):
    """The server did not answer, or answered 503 (shutting down, store unavailable)."""


class NoServerAvailable(ServerUnavailable):
    """Every server of a pool is dead."""


class FanOutError(ClientError):
    """A barrier call (backend registration, pause, resume) did not succeed everywhere.

    `succeeded` maps server URL -> answer, `failed` maps server URL -> the error; nothing is
    rolled back (resume the servers that did pause, or retry).
    """

    def __init__(self, what: str, succeeded: dict[str, Any], failed: dict[str, Exception]) -> None:
        causes = "; ".join(f"{url}: {exc}" for url, exc in failed.items())
        super().__init__(
            f"{what} failed on {len(failed)} of {len(succeeded) + len(failed)} servers: {causes}"
        )
        self.succeeded = succeeded
        self.failed = failed


def error_from_response(status: int, body: Any) -> ApiError:
    """The `ApiError` subclass for an error answer (status and envelope)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"type": "error", "message": str(body)[:500]}
    args = (status, str(error.get("type", "error")), str(error.get("message", "")))
    detail = error.get("detail")
    if status == 404:
        return NotFound(*args, detail)
    if status == 409:
        return Conflict(*args, detail)
    if status in (400, 413, 422):
        return InvalidRequest(*args, detail)
    return ApiError(*args, detail)
