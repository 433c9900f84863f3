"""Errors raised by the trainer clients.

One root, each leaf also the builtin it specialises, so callers can catch either::

    ClientError(Exception)
    ├── ApiError(ClientError)                          the server answered with its error envelope
    │   ├── NotFound(ApiError, LookupError)            404
    │   ├── Conflict(ApiError, ValueError)             409: job id reused for another request
    │   ├── InvalidRequest(ApiError, ValueError)       400 / 413 / 422
    │   └── InvalidResponse(ApiError)                  an answer that is not JSON or not the schema
    ├── FeedError(ClientError)                         a server's results feed keeps failing
    ├── ServerUnavailable(ClientError, ConnectionError) no answer, or 503
    │   └── NoServerAvailable(ServerUnavailable)       every server of a pool is dead
    ├── FanOutError(ClientError)                       a call sent to every server failed on some
    ├── InfraCircuitOpen(ClientError)                  a run of infra_errors stopped a collector
    ├── BatchShortfall(ClientError)                    dynamic sampling could not fill a batch
    ├── WeightPushError(ClientError)                   an inference engine refused new weights
    └── AtroposError(ClientError)                      an Atropos API refused what was sent

Outside the tree stay the builtins for the caller's own mistakes and waits: `ValueError` for
arguments a call cannot use, `RuntimeError` for a collector used before it is started,
`TimeoutError` for a wait (for results, groups or the pool's loop thread) that ran out.
"""

from collections import Counter
from typing import TYPE_CHECKING, Any

from agentroll.server.schema import Trajectory

if TYPE_CHECKING:
    from agentroll.trainer_clients.dynamic import Batch


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
        self.server: str | None = None
        """The server that answered, where a pool knows it."""

    def __str__(self) -> str:
        said = super().__str__()
        return said if self.server is None else f"{self.server}: {said}"

    @property
    def transient(self) -> bool:
        """Worth sending again later: the server is busy (429) or failing (5xx)."""
        return self.status == 429 or self.status >= 500


class NotFound(ApiError, LookupError):
    """404: no such job or backend."""


class Conflict(ApiError, ValueError):
    """409: the job id is already taken by a different request."""


class InvalidRequest(ApiError, ValueError):
    """400 / 413 / 422: the request is malformed, too large or names what does not exist."""


class InvalidResponse(ApiError):
    """The answer could not be read: not JSON, or not what the schema says (a proxy's error
    page, a newer server's field of the wrong type)."""


class FeedError(ClientError):
    """A server's results feed failed `attempts` times in a row for a reason that waiting does
    not cure (its answers cannot be read): the results it holds cannot be passed on."""

    def __init__(self, server: str, cause: BaseException, attempts: int) -> None:
        super().__init__(f"results feed of {server} failed {attempts} times in a row: {cause}")
        self.server = server
        self.cause = cause


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


class WeightPushError(ClientError):
    """An inference engine refused a step of a weight push (`weights.push_weights`), did not
    answer (`status` None), or reports another weight version afterwards."""

    def __init__(self, url: str, status: int | None, message: str) -> None:
        super().__init__(f"{url}: {status or 'no answer'}: {message}")
        self.url = url
        self.status = status


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


def _cause(trajectory: Trajectory) -> str:
    error = trajectory.error
    if error is None:
        return "unknown"
    return error.type if error.stage is None else f"{error.type} at {error.stage}"


class InfraCircuitOpen(ClientError):
    """`count` tries in a row ended `infra_error`: the collector stopped.

    `causes`: how many of them had each cause (`<type> at <stage>`); `backends`: the
    inference backends their sampled turns came from (empty when none sampled a token);
    `last_message`: the most common cause's latest error message.
    """

    def __init__(self, failures: list[Trajectory]) -> None:
        self.count = len(failures)
        self.causes: Counter[str] = Counter(_cause(t) for t in failures)
        self.backends = sorted({s.backend_id for t in failures for s in t.segments})
        top = self.causes.most_common(1)[0][0]
        latest = [t for t in failures if _cause(t) == top][-1]
        self.last_message = latest.error.message if latest.error is not None else ""
        self.job_ids = [t.job_id for t in failures[-3:]]
        causes = ", ".join(f"{cause} x{n}" for cause, n in self.causes.most_common())
        where = f"backends {', '.join(self.backends)}" if self.backends else "no backend reached"
        super().__init__(
            f"circuit breaker open: {self.count} infra_errors in a row ({causes}; {where}); "
            f"latest {top}: {self.last_message!r} (jobs ..., {', '.join(self.job_ids)}). "
            "Fix the backend or sandbox, then start a new collector"
        )


class BatchShortfall(ClientError):
    """A batch could not be filled: the stream ran out, or `max_refills` groups were dropped.
    `batch` holds what was kept (usable, though smaller than asked for)."""

    def __init__(self, batch: "Batch", size: int, why: str) -> None:
        zero = sum(1 for g in batch.dropped if g.valid)
        invalid = len(batch.dropped) - zero
        super().__init__(
            f"dynamic sampling kept {len(batch.groups)}/{size} groups after generating "
            f"{batch.groups_generated} ({zero} with equal rewards, {invalid} invalid): {why}"
        )
        self.batch = batch


class AtroposError(ClientError):
    """The Atropos API refused or could not read what was sent (`status`, its answer)."""

    def __init__(self, status: int, answer: str) -> None:
        super().__init__(f"Atropos API answered {status}: {answer[:500]}")
        self.status = status
