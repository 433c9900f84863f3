"""`to_episode`: trajectories as verifiers v1 episodes, read as prime-rl reads them
(`agentroll.testing.prime_env_client`, from verifiers a60a606 `verifiers/v1/trace.py`)."""

from typing import Any

from agentroll.server.schema import AgentTrace, Segment, Trajectory
from agentroll.testing.prime_env_client import branch, check_episode, num_turns, reward
from agentroll.trainer_clients.exports.verifiers_episode import to_episode

TASK = {"type": "h", "data": {"q": 1}}
CONVERSATION = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "again"},
    {"role": "assistant", "content": "a2"},
]


def _segment(start: int, end: int) -> Segment:
    return Segment(start=start, end=end, backend_id="b", policy_version=0, finish_reason="stop")


def _tokens() -> dict[str, Any]:
    return {
        "prompt_ids": [1, 2],
        "response_ids": [10, 11, 90, 91, 20, 99],
        "response_mask": [1, 1, 0, 0, 1, 0],
        "response_logprobs": [-0.1, -0.2, 0.0, 0.0, -0.5, 0.0],
        "segments": [_segment(0, 2), _segment(4, 5)],
    }


def _trajectory(messages: list[dict[str, Any]], **fields: Any) -> Trajectory:
    base = {
        "job_id": "j1",
        "handler": "h",
        **_tokens(),
        "reward": 0.5,
        "outcome": "agent_error",
        "status": "completed",
        "finish_reason": "max_turns",
        "messages": messages,
    }
    return Trajectory.model_validate({**base, **fields})


def test_one_path_whose_tokens_are_the_stream_the_engine_read() -> None:
    episode = to_episode(_trajectory(CONVERSATION), TASK)
    check_episode(episode)
    (trace,) = episode["traces"]
    assert episode["ok"] and trace["ok"]  # agent_error is scored: trained on, not dropped
    assert trace["stop_condition"] == "max_turns" and reward(trace) == 0.5
    tokens, mask, logprobs = branch(trace)
    assert tokens == [1, 2, 10, 11, 90, 91, 20]  # the final glue (99) was never read
    assert mask == [False, False, True, True, False, False, True]
    assert logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.5]
    # The glue rides on the message before each reply.
    assert [n["token_ids"] for n in trace["nodes"]] == [[], [1, 2], [10, 11], [90, 91], [20]]
    assert num_turns(trace) == 2


def test_unpaired_turns_keep_exact_tokens_without_guessing_messages() -> None:
    episode = to_episode(_trajectory(CONVERSATION[:3]), TASK)  # one message, two turns
    (trace,) = episode["traces"]
    assert [n["message"] for n in trace["nodes"]] == [
        {"role": "assistant", "content": "", "tool_calls": None}
    ] * 2
    assert branch(trace)[0] == [1, 2, 10, 11, 90, 91, 20]


def test_no_reward_is_a_failed_episode_with_its_cause_and_no_trace() -> None:
    failed = _trajectory(
        CONVERSATION,
        reward=None,
        outcome="infra_error",
        status="failed",
        error={"type": "llm_backend_unavailable", "message": "down"},
    )
    episode = to_episode(failed, TASK)
    check_episode(episode)
    assert episode["ok"] is False and episode["traces"] == []
    assert episode["errors"] == [{"type": "llm_backend_unavailable", "message": "down"}]


def test_each_agent_of_an_episode_is_a_trace_of_its_own() -> None:
    def trace(name: str, own: float | None, trainable: bool) -> AgentTrace:
        return AgentTrace(name=name, policy="p", trainable=trainable, reward=own, **_tokens())

    episode = to_episode(
        _trajectory(
            [],
            **{k: [] for k in _tokens()},
            agents=[trace("solver", 1.0, True), trace("critic", None, False)],
        ),
        TASK,
    )
    check_episode(episode)
    solver, critic = episode["traces"]
    assert (solver["agent"]["name"], reward(solver), solver["agent"]["trainable"]) == (
        "solver",
        1.0,
        True,
    )
    assert (critic["agent"]["name"], reward(critic), critic["agent"]["trainable"]) == (
        "critic",
        0.5,
        False,
    )
