"""The live policy version a collector judges staleness against, and the judgement itself.

The version is the newest of what the trainer set on the collector and what the pool learnt
from its last `resume` (or from the servers at start): versions only move forward, so a value
set once never hides a later `resume`. A sample is stale when any version it was sampled at is
more than `max_policy_lag` behind the live one, or ahead of it (the trainer's view of its own
policy is behind the servers': nothing can say how far off that sample is).
"""

from collections.abc import Callable, Sequence
from typing import Protocol

from agentroll.server.schema import DEFAULT_POLICY, AgentTrace, Trajectory


class _VersionSource(Protocol):
    policy_version: int | None
    policy_versions: dict[str, int]


class PolicyClock:
    """Live policy versions: the trainer's own (`set`, `named`) and the pool's, newest wins."""

    def __init__(self, pool: Callable[[], _VersionSource | None]) -> None:
        self._pool = pool
        self._set: int | None = None
        self.named: dict[str, int] = {}
        """Versions of named policies as the trainer sets them."""

    def set(self, version: int) -> None:
        self._set = version

    def _newest(self, *versions: int | None) -> int | None:
        known = [v for v in versions if v is not None]
        return max(known) if known else None

    def known(self) -> bool:
        pool = self._pool()
        return self._newest(self._set, None if pool is None else pool.policy_version) is not None

    def version(self) -> int:
        pool = self._pool()
        newest = self._newest(self._set, None if pool is None else pool.policy_version)
        return 0 if newest is None else newest

    def current(self, policy: str) -> int | None:
        """The live version of `policy` (None: unknown, so nothing of it is stale)."""
        if policy == DEFAULT_POLICY:
            return self.version()
        pool = self._pool()
        return self._newest(
            self.named.get(policy), None if pool is None else pool.policy_versions.get(policy)
        )

    def stale(
        self, trajectories: Sequence[Trajectory], max_lag: int | None
    ) -> list[tuple[str, str]]:
        """(job id, why) of each trajectory out of the bound now; none when unbounded. A
        multi-agent episode is judged by its trainable agents' traces, each against its own
        policy; frozen agents never make it stale."""
        if max_lag is None:
            return []
        out: list[tuple[str, str]] = []
        for trajectory in trajectories:
            why = self._why_stale(trajectory, max_lag)
            if why is not None:
                out.append((trajectory.job_id, f"{trajectory.job_id}: {why}"))
        return out

    def _why_stale(self, trajectory: Trajectory, max_lag: int) -> str | None:
        traces: list[Trajectory | AgentTrace] = [trajectory]
        if trajectory.agents is not None:
            traces = [a for a in trajectory.agents if a.trainable]
        for trace in traces:
            policy = trace.policy if isinstance(trace, AgentTrace) else DEFAULT_POLICY
            versions = trace.policy_versions or [s.policy_version for s in trace.segments]
            current = self.current(policy)
            if not versions or current is None:
                continue
            if current - min(versions) > max_lag:
                return f"{policy} version {min(versions)} lags the live {current} by > {max_lag}"
            if max(versions) > current:
                return f"{policy} version {max(versions)} is ahead of the live {current}"
        return None
