"""Exceptions of the rollout server: one root, and each error also the builtin it specialises.

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
    │   └── ResultRejected                        the database refused this one result
    │
    │   Defined beside the code that raises them:
    ├── Refused, StageTimeout(ServerError, TimeoutError)      pipeline.py: a job not started / a
    │                                             stage past its timeout (both end the job)
    ├── UnsafeSettingsError(ServerError, ValueError)          settings.py
    ├── BodyError(ServerError, ValueError)        http_body.py: MalformedBody, BodyTooLarge,
    │                                             BodyBudgetSpent; `.status` is the answer
    ├── BadRequest(ServerError, ValueError)       proxy/http11.py: a harness's malformed request
    ├── ClientGone                                api/disconnect.py: a long-poll's client left
    ├── GenerationAborted                         llm/gate.py: a pause aborted a generation call
    ├── TemplateRenderError(ServerError, ValueError)          llm/local_tokenizer.py
    ├── HTTPTransportError(ServerError, OSError)  llm/http.py: a backend exchange failed below HTTP
    │   ├── HTTPTimeout(HTTPTransportError, TimeoutError)
    │   └── HTTPConnectError(HTTPTransportError)   no connection: nothing was sent
    ├── BackendKindError(ServerError, LookupError)            llm/registry.py
    │   ├── UnknownBackendKind(BackendKindError, ValueError)
    │   └── DuplicateBackendKind(BackendKindError, ValueError)
    └── BackendError(ServerError, RuntimeError)   llm/base.py: a backend call failed
        ├── BackendPaused                         refused because generation is paused
        └── PauseUnsupported(BackendError, NotImplementedError)

Errors raised for the policy's or a handler's doing are the handler SDK's own
(`agentroll.handlers.AgentError`, `InfraError`); the API maps the errors above to status codes
and envelope types in one table (`agentroll.server.api.errors`).
"""

from collections.abc import Iterable, Sequence

from agentroll.server.schema import PauseResponse


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
