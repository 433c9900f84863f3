"""Policies: the weights a backend serves and an agent samples from, each with its own gate.

A single-agent deployment has one policy, `default`. A multi-agent job names a policy per
agent, and backends say which policy they serve (`BackendSpec.policy`). Each policy has its
own generation gate, so a weight update of one policy pauses only its backends and the
generations that sample from it, stamps only its segments with the new version, and leaves
the other agents generating. Its staleness bound is its own too.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from agentroll.server.llm.backend_pool import Backend
from agentroll.server.llm.gate import GenerationGate
from agentroll.server.schema import DEFAULT_POLICY, PolicyStatus


@dataclass(eq=False)
class Policy:
    name: str
    max_policy_lag: int | None = None
    """Jobs whose version of this policy lags the current one by more are not started."""
    gate: GenerationGate = field(default_factory=GenerationGate)
    lag_from_resume: bool = False
    """A resume set `max_policy_lag`: it is persisted with the pause state and outlives a
    restart (a configured bound alone is read from the settings anew)."""


class Policies:
    """Every policy this server has seen, created on first mention (a job, a backend, a pause:
    a policy may be paused before its first job arrives)."""

    def __init__(self, max_policy_lag: int | None = None) -> None:
        self._max_policy_lag = max_policy_lag
        self._policies: dict[str, Policy] = {}
        self.default = self.get(DEFAULT_POLICY)

    def get(self, name: str) -> Policy:
        policy = self._policies.get(name)
        if policy is None:
            policy = Policy(name, self._max_policy_lag)
            self._policies[name] = policy
        return policy

    def __iter__(self) -> Iterator[Policy]:
        return iter(list(self._policies.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._policies

    def statuses(self, backends: Iterable[Backend]) -> dict[str, PolicyStatus]:
        """Each policy's state and load, with its backends' calls in flight."""
        by_policy: dict[str, list[Backend]] = defaultdict(list)
        for backend in backends:
            by_policy[backend.policy].append(backend)
            self.get(backend.policy)  # a registered policy is listed before its first job
        out = {}
        for policy in self:
            gate, served = policy.gate, by_policy.get(policy.name, [])
            out[policy.name] = PolicyStatus(
                paused=gate.paused,
                mode=gate.mode,
                policy_version=gate.policy_version,
                max_policy_lag=policy.max_policy_lag,
                backends=[b.id for b in served],
                in_flight=sum(b.in_flight for b in served),
                queued=gate.waiting,
                generations=gate.load.generations,
                prompt_tokens=gate.load.prompt_tokens,
                completion_tokens=gate.load.completion_tokens,
            )
        return out
