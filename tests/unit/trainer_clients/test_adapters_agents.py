"""Multi-agent episodes on the trainer side: one batch per policy, of trainable traces only,
with GRPO statistics per task and agent; staleness judged per trainable agent."""

from typing import Any

import pytest

from agentroll.server.schema import AgentTrace, Segment, Trajectory
from agentroll.trainer_clients import AsyncGroupCollector, Group

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    agent_view,
    pad_batch,
    pad_policy_batches,
    policy_trajectories,
    to_verl,
)


def trace(name: str, policy: str, base: int, *, version: int = 0, **fields: Any) -> AgentTrace:
    """Prompt [base], then one sampled turn [base+1, base+2] and an observation [base+3]."""
    seg = Segment(start=0, end=2, backend_id="b", policy_version=version, finish_reason="stop")
    return AgentTrace(
        name=name,
        policy=policy,
        trainable=fields.pop("trainable", True),
        prompt_ids=[base],
        response_ids=[base + 1, base + 2, base + 3],
        response_mask=[1, 1, 0],
        response_logprobs=[-0.5, -0.25, 0.0],
        segments=[seg],
        policy_versions=[version],
        num_turns=1,
        **fields,
    )


def episode(job_id: str, group_id: str, reward: float, *agents: AgentTrace) -> Trajectory:
    return Trajectory(
        job_id=job_id,
        group_id=group_id,
        handler="h",
        outcome="ok",
        status="completed",
        reward=reward,
        agents=list(agents),
    )


def solver_verifier_group(group_id: str, rewards: list[float]) -> Group:
    episodes = [
        episode(
            f"{group_id}-s{k}",
            group_id,
            r,
            trace("solver", "solver", 100 * k + 10),
            trace("verifier", "frozen-judge", 100 * k + 50, trainable=False),
        )
        for k, r in enumerate(rewards)
    ]
    return Group(group_id=group_id, n=len(episodes), valid=True, trajectories=episodes)


def test_frozen_agents_are_left_out_and_each_trainable_trace_is_its_own_sample() -> None:
    by_policy = policy_trajectories([solver_verifier_group("g0", [1.0, 0.0])])
    assert list(by_policy) == ["solver"]  # the frozen judge's traces are never trained on
    views = by_policy["solver"]
    assert [v.job_id for v in views] == ["g0-s0/solver", "g0-s1/solver"]
    assert [v.group_id for v in views] == ["g0/solver", "g0/solver"]
    assert views[1].prompt_ids == [110] and views[1].response_ids == [111, 112, 113]
    assert [v.reward for v in views] == [1.0, 0.0]  # no reward of its own: the episode's
    assert all(v.agents is None for v in views)


def test_one_batch_per_policy_with_advantages_per_task_and_agent() -> None:
    selfplay = [
        episode(
            f"g1-s{k}",
            "g1",
            reward,
            trace("proposer", "shared", 10 * k, reward=1.0 - reward),
            trace("solver", "shared", 10 * k + 5),
        )
        for k, reward in enumerate([1.0, 0.0, 0.5])
    ]
    batches = pad_policy_batches([solver_verifier_group("g0", [1.0, 0.0]), *selfplay])
    assert sorted(batches) == ["shared", "solver"]
    solver = batches["solver"]
    assert solver.input_ids.tolist() == [[10, 11, 12, 13], [110, 111, 112, 113]]
    assert solver.loss_mask[:, solver.prompt_len :].tolist() == [[1, 1, 0], [1, 1, 0]]
    assert solver.advantages[0] > 0 > solver.advantages[1]
    shared = batches["shared"]
    assert shared.group_ids == ["g1/proposer", "g1/solver"] * 3
    # Two agents of one policy: their groups are normalised apart (proposers' rewards are
    # the handler's own per-agent ones, the solvers' the episode's).
    assert shared.rewards.tolist() == [0.0, 1.0, 1.0, 0.0, 0.5, 0.5]
    proposers = shared.advantages[[0, 2, 4]]
    solvers = shared.advantages[[1, 3, 5]]
    assert np.allclose(proposers, -solvers) and abs(float(proposers.sum())) < 1e-6
    assert to_verl(shared)["meta_info"]["job_ids"][:2] == ["g1-s0/proposer", "g1-s0/solver"]


def test_a_single_agent_episode_is_its_own_view_of_the_default_policy() -> None:
    single = Trajectory(
        job_id="j", group_id="g", handler="h", outcome="ok", status="completed", reward=1.0
    )
    assert policy_trajectories([single]) == {"default": [single]}


def test_episodes_without_a_reward_are_left_out() -> None:
    failed = Trajectory(job_id="j", handler="h", outcome="infra_error", status="failed")
    assert pad_policy_batches([failed]) == {}
    invalid = Group(group_id="g", n=2, valid=False, trajectories=[], reason="budget")
    assert policy_trajectories([invalid, solver_verifier_group("g0", [1.0, 0.0])]).keys() == {
        "solver"
    }


def test_agent_view_keeps_the_trace_tokens_exactly() -> None:
    solver = trace("solver", "solver", 7, version=3)
    view = agent_view(episode("e", "g", 1.0, solver), solver)
    for field in ("prompt_ids", "response_ids", "response_mask", "response_logprobs"):
        assert getattr(view, field) == getattr(solver, field)
    assert view.segments == solver.segments and view.policy_versions == [3]


def test_an_agents_view_carries_its_own_session_facts() -> None:
    solver = trace("solver", "solver", 7, metadata={"mixed_version_segments": 1})
    ep = episode("e", "g", 1.0, solver).model_copy(
        update={"metadata": {"run": "r1", "llm_retries": 4, "mixed_version_segments": 0}}
    )
    assert agent_view(ep, solver).metadata == {"run": "r1", "mixed_version_segments": 1}


def test_multi_agent_episodes_are_refused_where_they_would_train_on_nothing() -> None:
    group = solver_verifier_group("g", [0.0, 1.0])
    with pytest.raises(ValueError, match="batch them per policy with pad_policy_batches"):
        pad_batch([group])
    stray = episode("x", "g", 1.0, trace("solver", "solver", 7)).model_copy(
        update={"prompt_ids": [1], "response_ids": [2], "response_mask": [1]}
    )
    with pytest.raises(ValueError, match="tokens outside its agents' traces"):
        policy_trajectories([stray])


def test_staleness_is_judged_per_trainable_agent() -> None:
    collector = AsyncGroupCollector("http://127.0.0.1:9", max_policy_lag=1)
    collector.policy_versions.update(solver=5, judge=9)
    fresh = trace("solver", "solver", 1, version=4)
    old_judge = trace("judge", "judge", 2, version=1, trainable=False)
    judge = collector.clock.stale
    assert judge([episode("e1", "g", 1.0, fresh, old_judge)], 1) == []
    stale = trace("solver", "solver", 1, version=3)
    assert judge([episode("e2", "g", 1.0, stale, old_judge)], 1) == [
        ("e2", "e2: solver version 3 lags the live 5 by > 1")
    ]
    unknown = trace("critic", "critic", 3, version=0)  # no known current version: never stale
    assert judge([episode("e3", "g", 1.0, unknown)], 1) == []
