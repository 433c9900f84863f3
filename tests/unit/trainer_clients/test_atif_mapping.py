"""`to_atif`: every shape a stored trajectory can take, checked against Harbor's ATIF schema
(`agentroll.testing.atif_schema`, from Harbor 0.26.0's `src/harbor/models/trajectories/`).

Message text and tool-call arguments are the policy's: whatever it wrote must export as a
valid document, kept verbatim, never attached to tokens it did not produce."""

from typing import Any

import pytest
from pydantic import ValidationError

from agentroll.server.schema import AgentTrace, Segment, Trajectory
from agentroll.testing.atif_schema import validate_atif
from agentroll.trainer_clients.exports import to_atif

SYSTEM = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "add 2 and 2"}


def _segment(start: int, end: int, version: int = 0, reason: str = "stop") -> Segment:
    return Segment(
        start=start, end=end, backend_id="b0", policy_version=version, finish_reason=reason
    )


def _trajectory(messages: list[dict[str, Any]], **fields: Any) -> Trajectory:
    """Two sampled turns (ids 10-12 and 20-21) around a 2-token observation (mask 0)."""
    base: dict[str, Any] = {
        "job_id": "j1",
        "group_id": "g",
        "handler": "h",
        "prompt_ids": [1, 2, 3],
        "response_ids": [10, 11, 12, 90, 91, 20, 21],
        "response_mask": [1, 1, 1, 0, 0, 1, 1],
        "response_logprobs": [-0.1, -0.2, -0.3, 0.0, 0.0, -0.5, -0.6],
        "segments": [_segment(0, 3), _segment(5, 7)],
        "policy_versions": [0],
        "reward": 1.0,
        "outcome": "ok",
        "status": "completed",
        "messages": messages,
    }
    return Trajectory.model_validate({**base, **fields})


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_CONVERSATION = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": "", "tool_calls": [_call("c1", "add", '{"a": 2, "b": 2}')]},
    {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "add"},
    {"role": "assistant", "content": "4"},
]


def test_tokens_of_each_turn_ride_on_its_agent_step() -> None:
    atif = validate_atif(to_atif(_trajectory(TOOL_CONVERSATION)))
    assert atif.schema_version == "ATIF-v1.6" and atif.session_id == "j1"
    first, second = (s for s in atif.steps if s.source == "agent")
    assert first.metrics is not None and second.metrics is not None
    assert first.metrics.prompt_token_ids == [1, 2, 3]
    assert first.metrics.completion_token_ids == [10, 11, 12]
    assert first.metrics.logprobs == [-0.1, -0.2, -0.3]
    # The second call read the prompt and everything recorded before it, observation included.
    assert second.metrics.prompt_token_ids == [1, 2, 3, 10, 11, 12, 90, 91]
    assert second.metrics.completion_token_ids == [20, 21]
    assert second.metrics.extra == {
        "response_start": 5,
        "loss_mask": [1, 1],
        "segments": [_segment(5, 7).model_dump(mode="json")],
    }
    assert first.tool_calls is not None and first.observation is not None
    assert first.tool_calls[0].arguments == {"a": 2, "b": 2}
    assert first.observation.results[0].source_call_id == "c1"
    assert first.observation.results[0].content == "4"
    assert atif.final_metrics is not None
    assert (atif.final_metrics.total_prompt_tokens, atif.final_metrics.total_completion_tokens) == (
        3 + 8,
        5,
    )


def test_a_turn_split_by_a_pause_is_one_step_with_both_versions() -> None:
    split = [_segment(0, 2, version=3, reason="abort"), _segment(2, 3, version=4)]
    trajectory = _trajectory(
        TOOL_CONVERSATION, segments=[*split, _segment(5, 7, version=4)], policy_versions=[3, 4]
    )
    first = next(s for s in validate_atif(to_atif(trajectory)).steps if s.source == "agent")
    assert first.metrics is not None and first.metrics.extra is not None
    assert first.metrics.completion_token_ids == [10, 11, 12]
    assert [s["policy_version"] for s in first.metrics.extra["segments"]] == [3, 4]


def test_infra_error_exports_with_no_reward_and_its_cause() -> None:
    failed = _trajectory(
        [SYSTEM, USER],
        response_ids=[],
        response_mask=[],
        response_logprobs=[],
        segments=[],
        reward=None,
        outcome="infra_error",
        status="failed",
        error={"type": "llm_backend_unavailable", "message": "down", "stage": "run"},
    )
    atif = validate_atif(to_atif(failed))
    assert atif.extra is not None
    summary = atif.extra["agentroll"]
    assert summary["outcome"] == "infra_error" and summary["reward"] is None
    assert summary["error"]["type"] == "llm_backend_unavailable"
    assert all(step.metrics is None for step in atif.steps)


def test_turns_and_assistant_messages_that_disagree_are_not_paired() -> None:
    # A handler wrote a third assistant message no generation call produced.
    messages = [*TOOL_CONVERSATION, {"role": "assistant", "content": "written by the handler"}]
    atif = validate_atif(to_atif(_trajectory(messages)))
    assert all(step.metrics is None for step in atif.steps)
    assert atif.notes is not None and "2 generation turns for 3 assistant messages" in atif.notes
    assert atif.extra is not None
    turns = atif.extra["agentroll"]["turns"]
    assert [t["completion_token_ids"] for t in turns] == [[10, 11, 12], [20, 21]]


@pytest.mark.parametrize(
    ("written", "exported"),
    [
        ('{"a": 1', {"raw": '{"a": 1'}),  # not JSON
        ("[1, 2]", {"raw": "[1, 2]"}),  # JSON, not an object
        ({"a": 1}, {"a": 1}),  # already an object
        (None, {"raw": None}),
    ],
)
def test_tool_arguments_the_policy_wrote_are_kept_verbatim(written: Any, exported: Any) -> None:
    messages = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "f", written)]},
    ]
    trajectory = _trajectory(messages, segments=[_segment(0, 3)])
    agent = next(s for s in validate_atif(to_atif(trajectory)).steps if s.source == "agent")
    assert agent.tool_calls is not None and agent.tool_calls[0].arguments == exported


def test_odd_messages_still_make_a_valid_document() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "tool", "content": "orphan", "tool_call_id": "nobody"},  # before any call
        {"role": "developer", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "thinking",
            "tool_calls": ["not a call", {"function": "not an object"}, _call("c1", "f", "{}")],
        },
        {"role": "tool", "content": "answers nobody", "tool_call_id": "c9"},
    ]
    atif = validate_atif(to_atif(_trajectory(messages, segments=[_segment(0, 3)])))
    sources = [s.source for s in atif.steps]
    assert sources == ["system", "user", "agent", "system"]
    assert atif.steps[1].message == "hi\n[image_url]"
    assert atif.steps[1].extra == {"role": "developer"}
    agent = atif.steps[2]
    assert agent.reasoning_content == "thinking" and agent.message == ""
    assert agent.tool_calls is not None
    assert [c.tool_call_id for c in agent.tool_calls] == ["3-1", "c1"]
    assert atif.steps[3].observation is not None
    assert atif.steps[3].observation.results[0].source_call_id is None


def test_a_trajectory_with_no_messages_has_one_step_saying_so() -> None:
    atif = validate_atif(
        to_atif(
            _trajectory([], segments=[], response_ids=[], response_mask=[], response_logprobs=[])
        )
    )
    assert [s.message for s in atif.steps] == ["(no messages recorded)"]


def test_multi_agent_episodes_embed_one_trajectory_per_agent() -> None:
    def trace(name: str, reward: float | None) -> AgentTrace:
        return AgentTrace(
            name=name,
            policy="default",
            trainable=True,
            prompt_ids=[1],
            response_ids=[5, 6],
            response_mask=[1, 1],
            response_logprobs=[-1.0, -2.0],
            segments=[_segment(0, 2)],
            reward=reward,
            messages=[USER, {"role": "assistant", "content": name}],
        )

    episode = _trajectory(
        [],
        segments=[],
        response_ids=[],
        response_mask=[],
        response_logprobs=[],
        agents=[trace("solver", 1.0), trace("critic", None)],
    )
    atif = validate_atif(to_atif(episode))
    assert atif.schema_version == "ATIF-v1.7"
    subagents = atif.subagent_trajectories or []
    assert [s.trajectory_id for s in subagents] == ["j1/solver", "j1/critic"]
    solver = subagents[0]
    assert solver.agent.name == "agentroll:solver"
    assert solver.steps[1].metrics is not None
    assert solver.steps[1].metrics.completion_token_ids == [5, 6]
    assert solver.extra == {
        "agentroll": {
            "name": "solver",
            "policy": "default",
            "trainable": True,
            "reward": 1.0,
            "policy_versions": [],
        }
    }


def test_the_schema_check_refuses_what_harbor_refuses() -> None:
    """The validator can fail: on the rules Harbor's models enforce."""
    good = to_atif(_trajectory(TOOL_CONVERSATION))
    validate_atif(good)
    user_with_metrics = {**good, "steps": [dict(s) for s in good["steps"]]}
    user_with_metrics["steps"][1]["metrics"] = {"prompt_tokens": 1}
    unknown_key = {**good, "reward": 1.0}
    bad_order = {**good, "steps": list(reversed(good["steps"]))}
    wrong_call = {**good, "steps": [dict(s) for s in good["steps"]]}
    wrong_call["steps"][2]["observation"] = {"results": [{"source_call_id": "zz", "content": ""}]}
    for document, complaint in (
        (user_with_metrics, "only on agent steps"),
        (unknown_key, "Extra inputs are not permitted"),
        (bad_order, "step_id"),
        (wrong_call, "names no tool call"),
    ):
        with pytest.raises(ValidationError, match=complaint):
            validate_atif(document)
