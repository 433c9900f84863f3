"""Exceptions of the handler SDK and the built-in handlers, all in this one module. (The
modules that raise them re-export their names, so older import paths such as
`agentroll.handlers.builtin.harbor.task.TaskFormatError` keep working.)

    HandlerError
    ├── AgentError             the policy broke the protocol -> outcome agent_error
    │   ├── ContextLengthExceeded      prompt + budget does not fit the model's context
    │   └── UnservableRequest          a request the policy shaped that no backend is sent
    ├── InfraError             sandbox, backend or judge failed -> outcome infra_error
    │   ├── LLMUnavailable             no backend could serve a generation
    │   ├── UndeclaredAgent(InfraError, KeyError)  `ctx.agents[name]` for an agent the job lacks
    │   ├── VerifierFailed             a verifier gave no usable reward (alias VerifierFailure)
    │   │   └── SeedFailure            a resources server's `/seed_session` failed
    │   ├── VerifiersSetupError        a verifiers environment could not be installed
    │   ├── CallFailed                 an openreward call got no usable answer (blamed by a control)
    │   ├── StepFailed                 an OpenEnv step got no answer (blamed by a replayed control)
    │   └── VerifiersRewardFailed      a verifiers taskset's reward code gave no reward
    ├── RegistryError(HandlerError, LookupError)
    │   ├── UnknownHandlerError(RegistryError, KeyError)
    │   ├── DuplicateHandlerError(RegistryError, ValueError)   a handler or agent name taken twice
    │   ├── UnknownAgentError(RegistryError, KeyError)      no agent of that name
    │   ├── UnknownParserError(RegistryError, KeyError)     no tool-call parser of that name
    │   └── DuplicateParserError(RegistryError, ValueError)
    ├── TaskFormatError(HandlerError, ValueError)   not a usable Harbor task (400 at submission)
    ├── RowError(HandlerError, ValueError)          a SWE dataset row that is not an instance
    ├── OfficialPackageMissing(HandlerError, RuntimeError)   `swebench` is not installed
    ├── HarborRegistryError(HandlerError, ValueError)   a Harbor registry or dataset unusable
    ├── UnsupportedEnvironment(HandlerError, ValueError)  a verifiers taskset needing more
    ├── VerifiersWorkerFailure         a verifiers worker timed out, died or did not start
    ├── ReplayDiverged         a replayed verifiers rollout's environment asked another turn
    │   └── ReplayOutOfTime  RUN's budget cannot hold a replayed rollout's next step
    ├── Unconfinable(HandlerError, RuntimeError)   bubblewrap is missing: no worker runs
    ├── ToolRefused            a harness's MCP tool call that cannot run (the policy's doing)
    └── UnreadableFile         a file in a sandbox the agent left unreadable (too large, a FIFO)
        └── MissingFile                no regular file at the path

Each error carries a stable `cause` string that ends up in the trajectory's `error.type`
when it escapes a stage (`classify_error`: AgentError -> agent_error, any other -> infra_error).
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentroll.handlers.builtin.harbor.verify import VerifierRun


class HandlerError(Exception):
    cause: str = "handler_error"

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        if cause is not None:
            self.cause = cause


class AgentError(HandlerError):
    """The policy broke the protocol; the reward is still meaningful."""

    cause = "agent_error"

    def __init__(
        self, message: str, *, cause: str | None = None, finish_reason: str | None = None
    ) -> None:
        super().__init__(message, cause=cause)
        self.finish_reason = finish_reason


class ContextLengthExceeded(AgentError):
    cause = "context_overflow"

    def __init__(self, message: str) -> None:
        super().__init__(message, finish_reason="length")


class UnservableRequest(AgentError):
    """A generation or tokenization request the policy shaped (a harness's call, a prompt
    holding its replies or tool output) that is never sent to a backend: token ids outside the
    model's vocabulary, or a request a backend already failed on right after receiving it.
    One request cannot take down one backend after another; the rollout goes on (a harness
    gets the error as from a real server) and is scored. `status` is the HTTP status a
    harness is answered with."""

    cause = "unservable_request"

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class InfraError(HandlerError):
    """Infrastructure failed; never scored, the trainer drops and resubmits."""

    cause = "infra_error"


class LLMUnavailable(InfraError):
    cause = "llm_backend_unavailable"


class UndeclaredAgent(InfraError, KeyError):
    """A handler asked for an agent its job did not declare: the job and the handler disagree,
    which is never the policy's doing. A `KeyError` too, so `in` and `.get()` work."""

    cause = "undeclared_agent"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RegistryError(HandlerError, LookupError):
    cause = "registry_error"


class UnknownHandlerError(RegistryError, KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown handler {name!r}; known handlers: {', '.join(known) or 'none'}")
        self.name = name
        self.known = known

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class DuplicateHandlerError(RegistryError, ValueError):
    pass


class UnknownAgentError(RegistryError, KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown agent {name!r}; known agents: {', '.join(known) or 'none'}")
        self.name = name
        self.known = known

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class TaskFormatError(HandlerError, ValueError):
    """The folder is not a usable Harbor or Terminal-Bench 1 task (a 400 at submission)."""


class VerifierFailed(InfraError):
    """A verifier (a Harbor task's tests, a resources server's `/verify`) did not produce a
    usable reward: the task or its tests are broken, or the code they ran broke them (the
    handler's control tells which)."""

    cause = "verifier_failed"

    def __init__(
        self, message: str, run: "VerifierRun | None" = None, *, cause: str | None = None
    ) -> None:
        super().__init__(message, cause=cause)
        self.run = run


VerifierFailure = VerifierFailed
"""The same failure under the name the resources-server client gave it first."""


class SeedFailure(VerifierFailed):
    """`/seed_session` failed: it saw only the dataset row, never the policy's work."""


class UnreadableFile(HandlerError):
    """The file is missing, not a regular file, too large or cannot be read."""


class MissingFile(UnreadableFile):
    """There is no regular file at the path."""


class RowError(HandlerError, ValueError):
    """A row that cannot become an instance; the message names the row and the field."""


class OfficialPackageMissing(HandlerError, RuntimeError):
    """The `swebench` package is not installed here."""


class UnknownParserError(RegistryError, KeyError):
    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__(
            f"unknown tool-call parser {name!r}; known parsers: {', '.join(known) or 'none'}"
        )
        self.name = name
        self.known = list(known)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class DuplicateParserError(RegistryError, ValueError):
    pass


class HarborRegistryError(HandlerError, ValueError):
    """The registry, the dataset or one of its tasks cannot be used (the message says why)."""


class UnsupportedEnvironment(HandlerError, ValueError):
    """A verifiers taskset needs what the `verifiers` handler does not run yet."""


class VerifiersSetupError(InfraError):
    """The verifiers environment could not be installed (pip failed, timed out, no disk)."""

    cause = "verifiers_setup_failed"


class VerifiersRewardFailed(InfraError):
    """A verifiers taskset's reward code raised, hung, died or gave no finite score."""

    cause = "verifiers_reward_failed"


class VerifiersWorkerFailure(HandlerError):
    """A verifiers worker's request failed: `kind` is `timeout`, `crashed` or `unavailable`."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class Unconfinable(HandlerError, RuntimeError):
    """bubblewrap is not installed: verifiers workers run only confined."""


class ToolRefused(HandlerError):
    """A tool call over MCP that cannot run (no such tool, arguments that do not fit): the
    policy's doing, answered as a JSON-RPC error and scored."""


class CallFailed(InfraError):
    """An openreward environment gave no usable answer to what was asked: none within
    `timeout_s`, one over its size bound, or (a tool call) the tool raised. A tool call's
    failure is blamed by the handler's control; any other stays infra."""


class StepFailed(InfraError):
    """An OpenEnv environment gave no answer to a `step`: its step raised (`EXECUTION_ERROR`),
    none came within the step's bound, or the WebSocket dropped. `action` is the step's; the
    handler blames it by replaying the episode to a control (`openenv.replay`)."""

    def __init__(self, message: str, action: dict[str, Any], *, cause: str) -> None:
        super().__init__(message, cause=cause)
        self.action = action


class ReplayDiverged(HandlerError):
    """A replayed rollout's environment asked another turn than the first time: the replay
    says nothing, and the first failure stands."""

    cause = "verifiers_replay_diverged"


class ReplayOutOfTime(ReplayDiverged):
    """RUN's budget cannot wait out a replayed rollout's next step: the first failure stands."""

    cause = "verifiers_replay_out_of_time"
