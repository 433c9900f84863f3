"""A multi-agent job's agents: one token session per declared agent, and their traces.

Each agent gets its own `TokenSession`, of the same class and on the same path (gate, retries,
routing) as `ctx.llm`, restricted to the backends of the agent's policy and paused by that
policy's gate. When the rollout ends, each session becomes one `AgentTrace` of the trajectory,
held to the invariants of the single-agent token fields.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from agentroll.handlers import UndeclaredAgent
from agentroll.server.llm import TokenSession
from agentroll.server.recorded import logprobs_info
from agentroll.server.schema import AgentTrace


@dataclass(frozen=True, eq=False)
class JobAgent:
    """The server's `AgentSession`: one declared agent and its own session."""

    name: str
    policy: str
    trainable: bool
    llm: TokenSession


class JobAgents(Mapping[str, JobAgent]):
    """`ctx.agents`: the declared agents by name; an undeclared name is `UndeclaredAgent`."""

    def __init__(self, agents: Mapping[str, JobAgent] | None = None) -> None:
        self._agents = dict(agents or {})

    def __getitem__(self, name: str) -> JobAgent:
        agent = self._agents.get(name)
        if agent is None:
            declared = ", ".join(sorted(self._agents)) or "none (a single-agent job)"
            raise UndeclaredAgent(
                f"the handler asked for agent {name!r}, which the job does not declare "
                f"(declared: {declared})"
            )
        return agent

    def __iter__(self) -> Iterator[str]:
        return iter(self._agents)

    def __len__(self) -> int:
        return len(self._agents)

    def sessions(self) -> list[TokenSession]:
        return [agent.llm for agent in self._agents.values()]

    def traces(self, rewards: Mapping[str, float] | None) -> list[AgentTrace]:
        """One trace per agent, in declaration order. `rewards`: the per-agent rewards of a
        scored rollout (None when it carries no reward); each must name a declared agent."""
        unknown = sorted(set(rewards or {}) - set(self._agents))
        if unknown:
            raise ValueError(f"the reward names agents the job does not declare: {unknown}")
        return [_trace(agent, (rewards or {}).get(agent.name)) for agent in self._agents.values()]


def _trace(agent: JobAgent, reward: float | None) -> AgentTrace:
    llm = agent.llm
    metadata: dict[str, object] = {}
    if llm.retries:
        metadata["llm_retries"] = llm.retries
    if llm.mixed_version_segments:
        metadata["mixed_version_segments"] = llm.mixed_version_segments
    return AgentTrace(
        name=agent.name,
        policy=agent.policy,
        trainable=agent.trainable,
        prompt_ids=llm.prompt_ids,
        response_ids=llm.response_ids,
        response_mask=llm.response_mask,
        response_logprobs=llm.response_logprobs,
        segments=llm.segments,
        policy_versions=sorted({s.policy_version for s in llm.segments}),
        logprobs=logprobs_info(llm.segments, llm.sampling),
        routed_experts=llm.routed_experts,
        num_turns=llm.num_turns,
        reward=reward,
        messages=list(llm.messages),
        tools=llm.tools,
        metadata=metadata,
    )
