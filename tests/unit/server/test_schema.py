import pytest
from pydantic import ValidationError

from agentroll.server.schema import (
    AgentTrace,
    BackendSpec,
    CancelFilter,
    JobRequest,
    Outcome,
    Segment,
    Trajectory,
)


def _trajectory(**fields: object) -> Trajectory:
    base: dict[str, object] = {
        "job_id": "j",
        "handler": "math",
        "outcome": "ok",
        "status": "completed",
        "reward": 1.0,
    }
    return Trajectory.model_validate({**base, **fields})


def test_token_fields_must_align() -> None:  # docs/design.md, invariant 2
    ok = _trajectory(response_ids=[1, 2], response_mask=[1, 0], response_logprobs=[-0.1, 0.0])
    assert ok.schema_version == "agentroll.trajectory.v1"
    with pytest.raises(ValidationError, match="equal lengths"):
        _trajectory(response_ids=[1, 2], response_mask=[1], response_logprobs=[-0.1, 0.0])


def test_infra_error_never_carries_a_reward() -> None:
    with pytest.raises(ValidationError, match="no reward"):
        _trajectory(outcome=Outcome.infra_error, status="failed", reward=0.0)


@pytest.mark.parametrize("outcome", [Outcome.ok, Outcome.agent_error])
@pytest.mark.parametrize("reward", [None, float("nan"), float("inf")])
def test_a_scored_outcome_always_carries_a_finite_reward(outcome: Outcome, reward: object) -> None:
    with pytest.raises(ValidationError, match=f"an {outcome.value} trajectory carries a finite"):
        _trajectory(outcome=outcome, reward=reward)
    assert _trajectory(outcome=outcome, reward=0.0).reward == 0.0


@pytest.mark.parametrize("outcome", [Outcome.timed_out, Outcome.cancelled])
def test_a_dropped_outcome_may_come_without_a_reward(outcome: Outcome) -> None:
    assert _trajectory(outcome=outcome, status=outcome.value, reward=None).reward is None


def test_segments_stay_inside_the_response() -> None:
    seg = Segment(start=0, end=3, backend_id="b", policy_version=0, finish_reason="stop")
    with pytest.raises(ValidationError, match="outside response"):
        _trajectory(response_ids=[1], response_mask=[1], response_logprobs=[0.0], segments=[seg])


def test_job_request_is_strict() -> None:
    with pytest.raises(ValidationError, match="extra"):
        JobRequest.model_validate({"handler": "math", "instance": {}, "tempreature": 1})
    with pytest.raises(ValidationError, match="job_id"):
        JobRequest.model_validate({"handler": "math", "instance": {}, "job_id": "has space"})
    with pytest.raises(ValidationError, match="temperature"):
        JobRequest.model_validate({"handler": "m", "instance": {}, "sampling": {"temperature": 9}})


def test_cancel_filter_needs_exactly_a_criterion() -> None:
    with pytest.raises(ValidationError, match="give group_id"):
        CancelFilter()
    with pytest.raises(ValidationError, match="cannot be combined"):
        CancelFilter(all=True, group_id="g")
    assert CancelFilter(all=True).all


def _trace(**fields: object) -> dict[str, object]:
    return {"name": "critic", "policy": "p", "trainable": True, **fields}


def test_every_agent_trace_holds_the_token_invariants() -> None:
    seg = Segment(start=0, end=3, backend_id="b", policy_version=0, finish_reason="stop")
    with pytest.raises(ValidationError, match="equal lengths"):
        _trajectory(agents=[_trace(response_ids=[1, 2], response_mask=[1], response_logprobs=[0])])
    with pytest.raises(ValidationError, match="outside response"):
        AgentTrace.model_validate(
            _trace(response_ids=[1], response_mask=[1], response_logprobs=[0.0], segments=[seg])
        )


def test_no_agent_of_an_infra_error_carries_a_reward_and_names_are_unique() -> None:
    with pytest.raises(ValidationError, match="no reward"):
        _trajectory(
            outcome="infra_error", status="failed", reward=None, agents=[_trace(reward=0.0)]
        )
    with pytest.raises(ValidationError, match="unique"):
        _trajectory(agents=[_trace(), _trace()])


def test_agents_appear_only_in_multi_agent_records_and_requests() -> None:
    single = _trajectory()
    assert "agents" not in single.model_dump() and '"agents"' not in single.model_dump_json()
    multi = _trajectory(agents=[_trace()])
    assert multi.model_dump(mode="json")["agents"][0]["name"] == "critic"
    request = JobRequest.model_validate({"handler": "m", "instance": {}})
    assert "agents" not in request.model_dump(mode="json")
    with_agents = JobRequest.model_validate(
        {"handler": "m", "instance": {}, "agents": {"critic": {"policy": "p", "trainable": False}}}
    )
    assert with_agents.model_dump(mode="json")["agents"] == {
        "critic": {"policy": "p", "trainable": False, "policy_version": None}
    }


def test_backends_serve_the_default_policy_unless_told_otherwise() -> None:
    base = {"base_url": "http://127.0.0.1:1"}
    assert BackendSpec.model_validate(base).policy == "default"
    assert BackendSpec.model_validate({**base, "policy": "critic-v2"}).policy == "critic-v2"
    with pytest.raises(ValidationError, match="policy"):
        BackendSpec.model_validate({**base, "policy": "has space"})
