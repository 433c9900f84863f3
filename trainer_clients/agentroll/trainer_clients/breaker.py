"""The collector's circuit breaker: a run of `infra_error`s stops it with their cause.

Retrying an `infra_error` is right when the failure is passing (a sandbox lost, a server
restarted). When a backend or the sandbox runtime is broken for good, every try fails the
same way and a collector that keeps resampling burns the cluster and never says why. After
`limit` infra_errors in a row (no try between them that ran: `ok`, `agent_error` or
`timed_out`), the breaker opens with `InfraCircuitOpen`, naming the causes from the results'
error fields and the backends that served the failing tries.
"""

from collections import Counter

from agentroll.server.schema import Outcome, Trajectory
from agentroll.trainer_clients.errors import ClientError

RAN = frozenset({Outcome.ok, Outcome.agent_error, Outcome.timed_out})


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


def _cause(trajectory: Trajectory) -> str:
    error = trajectory.error
    if error is None:
        return "unknown"
    return error.type if error.stage is None else f"{error.type} at {error.stage}"


class InfraBreaker:
    """Counts consecutive `infra_error`s among finished tries (`limit` None: never opens)."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"max_consecutive_infra_errors must be >= 1 or None (got {limit})")
        self.limit = limit
        self._run: list[Trajectory] = []

    def note(self, trajectory: Trajectory) -> None:
        """Count one finished try; `InfraCircuitOpen` when it completes a run of `limit`.
        A try that ran resets the run; a cancelled one says nothing either way."""
        if trajectory.outcome in RAN:
            self._run.clear()
        elif trajectory.outcome is Outcome.infra_error:
            self._run.append(trajectory)
            if self.limit is not None and len(self._run) >= self.limit:
                raise InfraCircuitOpen(self._run)
