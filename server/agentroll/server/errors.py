"""Exceptions of the rollout server, all in this one module: one root, and each error also
the builtin it specialises. (The modules that raise them re-export their names, so older
import paths such as `agentroll.server.llm.base.BackendError` keep working.)

    ServerError
    ├── ShuttingDown                              a submission after shutdown began
    ├── InvalidInstances(ServerError, ValueError) handlers refused task instance(s)
    ├── JobConflict(ServerError, ValueError)      job id(s) already used for another request
    ├── TooManyJobs                               admitting would pass `max_live_jobs`
    ├── NotFound(ServerError, LookupError)
    │   ├── UnknownJob                            no job with that id
    │   ├── UnknownBackend                        no backend with that id
    │   └── UnknownPolicy                         a policy no backend serves and no job names
    ├── InvalidBackend(ServerError, ValueError)   a backend spec that cannot be used
    ├── BackendConflict(ServerError, ValueError)  a backend id registered with another spec
    ├── VersionConflict(ServerError, ValueError)  resume to an older policy version
    ├── PauseTimeout(ServerError, TimeoutError)   generations still in flight after a pause's wait
    ├── StoreError(ServerError, RuntimeError)     the job store cannot take writes
    │   ├── ResultRejected                        the database refused this one result
    │   └── ViewerUnavailable                     a result database the viewer cannot read
    ├── Refused                                   a job may not start (e.g. too stale policy)
    ├── StageTimeout(ServerError, TimeoutError)   a stage past its timeout (both end the job)
    ├── UnsafeSettingsError(ServerError, ValueError)   settings that would expose the server
    ├── ClientGone                                a long-poll's client left
    ├── BodyError(ServerError, ValueError)        a request body that cannot be read;
    │   ├── MalformedBody                         `.status` is the answer (400, 413, 429)
    │   ├── BodyTooLarge
    │   └── BodyBudgetSpent
    ├── BadRequest(ServerError, ValueError)       a harness's malformed request to its LLM proxy
    ├── GenerationAborted                         a pause aborted a generation call
    ├── TemplateRenderError(ServerError, ValueError)   the chat template refused the messages
    ├── HTTPTransportError(ServerError, OSError)  a backend exchange failed below HTTP
    │   ├── HTTPTimeout(HTTPTransportError, TimeoutError)
    │   └── HTTPConnectError(HTTPTransportError)   no connection: nothing was sent
    ├── BackendKindError(ServerError, LookupError)
    │   ├── UnknownBackendKind(BackendKindError, ValueError)
    │   └── DuplicateBackendKind(BackendKindError, ValueError)
    ├── BackendError(ServerError, RuntimeError)   a backend call failed
    │   ├── BackendPaused                         refused because generation is paused
    │   └── PauseUnsupported(BackendError, NotImplementedError)
    ├── EngineSetupError(ServerError, RuntimeError)    the local vLLM environment not created
    └── EngineStartError(ServerError, RuntimeError)    the local vLLM server did not come up

Errors raised for the policy's or a handler's doing are the handler SDK's own
(`agentroll.handlers.AgentError`, `InfraError`); the API maps the errors above to status codes
and envelope types in one table (`agentroll.server.api.errors`).
"""

from collections.abc import Iterable, Sequence

from agentroll.server.schema import PauseResponse

__all__ = [
    "BackendConflict",
    "BackendError",
    "BackendKindError",
    "BackendPaused",
    "BadRequest",
    "BodyBudgetSpent",
    "BodyError",
    "BodyTooLarge",
    "ClientGone",
    "DuplicateBackendKind",
    "EngineSetupError",
    "EngineStartError",
    "GenerationAborted",
    "HTTPConnectError",
    "HTTPTimeout",
    "HTTPTransportError",
    "InvalidBackend",
    "InvalidInstances",
    "JobConflict",
    "MalformedBody",
    "NotFound",
    "PauseTimeout",
    "PauseUnsupported",
    "Refused",
    "ResultRejected",
    "ServerError",
    "ShuttingDown",
    "StageTimeout",
    "StoreError",
    "TemplateRenderError",
    "TooManyJobs",
    "UnknownBackend",
    "UnknownBackendKind",
    "UnknownJob",
    "UnknownPolicy",
    "UnsafeSettingsError",
    "VersionConflict",
    "ViewerUnavailable",
]


class ServerError(Exception):
    detail: object = None
    """Machine-readable particulars of the error; the API sends them as the envelope's `detail`."""


class ShuttingDown(ServerError):
    def __init__(self) -> None:
        super().__init__("the server is shutting down")


class InvalidInstances(ServerError, ValueError):
    """A submission whose task instance(s) their handlers refused; nothing of it was admitted."""

    def __init__(self, problems: list[dict[str, object]]) -> None:
        super().__init__("invalid task instance(s)")
        self.detail = problems
        """One `{"index", "job_id", "error"}` per refused instance."""


class JobConflict(ServerError, ValueError):
    """Job ids already used for a different request; nothing of the submission was admitted."""

    def __init__(self, job_ids: Sequence[str]) -> None:
        super().__init__("job id(s) already used for a different request")
        self.detail = sorted(set(job_ids))


class TooManyJobs(ServerError):
    def __init__(self, max_live_jobs: int) -> None:
        super().__init__(f"at most {max_live_jobs} unfinished jobs")


class NotFound(ServerError, LookupError):
    pass


class UnknownJob(NotFound):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r}")
        self.job_id = job_id


class UnknownBackend(NotFound):
    def __init__(self, backend_id: str) -> None:
        super().__init__(f"no backend {backend_id!r}")
        self.backend_id = backend_id


class UnknownPolicy(NotFound):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(
            f"no policy {name!r}: no registered backend serves it and no job names it "
            f"(known: {', '.join(sorted(known))})"
        )
        self.name = name


class InvalidBackend(ServerError, ValueError):
    """A backend spec that cannot be used (e.g. a `tokenizer_path` with no tokenizer in it)."""


class BackendConflict(ServerError, ValueError):
    """A backend id is already registered with a different specification."""


class VersionConflict(ServerError, ValueError):
    """A resume to a policy version older than the current one."""


class PauseTimeout(ServerError, TimeoutError):
    """Generations were still in flight when a pause stopped waiting; the gate stays closed."""

    def __init__(self, response: PauseResponse) -> None:
        super().__init__(
            f"{response.in_flight} generation(s) still in flight after {response.waited_s:.1f} s"
        )
        self.detail = response.model_dump()


class StoreError(ServerError, RuntimeError):
    """The store cannot take writes (disk full, I/O error); nothing committed is lost."""


class ResultRejected(StoreError):
    """The database refused this one result (a constraint); retrying it will not help."""


class ViewerUnavailable(StoreError):
    """The database cannot be read (missing, not a result store, or too slow to answer)."""


class ClientGone(ServerError):
    """The client disconnected before the answer was ready."""


class EngineSetupError(ServerError, RuntimeError):
    """The engine's environment could not be created (pip failed, timed out, no disk)."""


class EngineStartError(ServerError, RuntimeError):
    """The engine exited or did not become healthy in time; the message has its log's tail."""


class BodyError(ServerError, ValueError):
    """The body cannot be read; `status` is what a server answers (it then closes)."""

    status = 400


class MalformedBody(BodyError):
    """The body's framing is not valid HTTP/1.1."""


class BodyTooLarge(BodyError):
    """The body would be larger than its limit."""

    status = 413


class BodyBudgetSpent(BodyError):
    """Bodies read earlier and still held leave too little room for this one (retry later)."""

    status = 429


class BackendError(ServerError, RuntimeError):
    """A backend call failed. `retryable` means no token was committed and another try may work.

    `status` is the HTTP status, None when no answer came; `timed_out` marks a backend that
    was reachable but too slow (not a reason to route around it: health probes decide that);
    `sent` is False when no connection was made, so the backend never saw the request.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        timed_out: bool = False,
        sent: bool = True,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.timed_out = timed_out
        self.sent = sent


class BackendPaused(BackendError):
    """The backend refused a request because generation is paused; retry after resume."""

    def __init__(self, message: str, *, status: int | None = 503) -> None:
        super().__init__(message, retryable=True, status=status)


class PauseUnsupported(BackendError, NotImplementedError):
    """The backend version has no such pause control (e.g. vLLM 0.11 has no `/pause`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class GenerationAborted(ServerError):
    """A generation call was aborted by a pause before the backend answered."""


class HTTPTransportError(ServerError, OSError):
    """The exchange failed below HTTP: refused, reset, closed early, malformed, timed out."""


class HTTPTimeout(HTTPTransportError, TimeoutError):
    pass


class HTTPConnectError(HTTPTransportError):
    """No connection could be made: the request was never sent."""


class TemplateRenderError(ServerError, ValueError):
    """The chat template refused the messages (or the final message is not continuable)."""


class BackendKindError(ServerError, LookupError):
    pass


class UnknownBackendKind(BackendKindError, ValueError):
    def __init__(self, kind: str, known: list[str]) -> None:
        super().__init__(f"unknown backend kind {kind!r}; known: {', '.join(known)}")
        self.kind = kind
        self.known = known


class DuplicateBackendKind(BackendKindError, ValueError):
    pass


class Refused(ServerError):
    """The job may not start (e.g. its policy is too stale); it ends cancelled with `cause`."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class StageTimeout(ServerError, TimeoutError):
    def __init__(self, stage: str, seconds: float) -> None:
        super().__init__(f"{stage} exceeded its {seconds:g} s timeout")
        self.stage = stage


class BadRequest(ServerError, ValueError):
    """The bytes on the wire are not an HTTP/1.1 request we can serve."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class UnsafeSettingsError(ServerError, ValueError):
    """A combination of settings that would expose the server; refused at start-up."""
