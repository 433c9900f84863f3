"""The collector's circuit breaker: a run of `infra_error`s stops it with their cause.

Retrying an `infra_error` is right when the failure is passing (a sandbox lost, a server
restarted). When a backend or the sandbox runtime is broken for good, every try fails the
same way and a collector that keeps resampling burns the cluster and never says why. After
`limit` infra_errors in a row (no try between them that ran: `ok`, `agent_error` or
`timed_out`), the breaker opens with `InfraCircuitOpen`, naming the causes from the results'
error fields and the backends that served the failing tries.
"""

from agentroll.server.schema import Outcome, Trajectory
from agentroll.trainer_clients.errors import InfraCircuitOpen

RAN = frozenset({Outcome.ok, Outcome.agent_error, Outcome.timed_out})


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
