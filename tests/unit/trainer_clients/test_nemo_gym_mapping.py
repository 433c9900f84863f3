"""`verify_response`: trajectories as NeMo Gym's `/run` answer, read as NeMo RL reads it
(`agentroll.testing.nemo_gym_client`, from NeMo RL 7ea279a `nemo_rl/environments/nemo_gym.py`)."""

from typing import Any

import pytest

from agentroll.server.schema import Segment, Trajectory
from agentroll.testing import nemo_gym_client
from agentroll.trainer_clients.exports.nemo_gym import sampling_from, verify_response

ROW = {"responses_create_params": {"input": "add 2 and 2"}, "agent_ref": {"name": "a"}}


def _trajectory(messages: list[dict[str, Any]], **fields: Any) -> Trajectory:
    base: dict[str, Any] = {
        "job_id": "j1",
        "handler": "h",
        "prompt_ids": [1, 2],
        "response_ids": [10, 11, 90, 20, 21, 22],
        "response_mask": [1, 1, 0, 1, 1, 1],
        "response_logprobs": [-0.1, -0.2, 0.0, -0.4, -0.5, -0.6],
        # The second reply was split by a pause: two contiguous segments, one turn.
        "segments": [
            Segment(start=0, end=2, backend_id="b", policy_version=0, finish_reason="stop"),
            Segment(start=3, end=4, backend_id="b", policy_version=0, finish_reason="abort"),
            Segment(start=4, end=6, backend_id="b", policy_version=1, finish_reason="stop"),
        ],
        "reward": 1.0,
        "outcome": "ok",
        "status": "completed",
        "messages": messages,
    }
    return Trajectory.model_validate({**base, **fields})


def test_turns_that_pair_with_no_message_still_carry_their_exact_tokens() -> None:
    # One assistant message for two turns: no text is guessed, the tokens stay exact.
    answer = verify_response(_trajectory([{"role": "assistant", "content": "4"}]), ROW, "m")
    nemo_gym_client.check_verify_response(answer)
    log = nemo_gym_client.message_log(answer)
    assert [m["token_ids"] for m in log] == [[1, 2], [10, 11], [90], [20, 21, 22]]
    assert log[3]["generation_logprobs"] == [-0.4, -0.5, -0.6]
    texts = [i["content"][0]["text"] for i in answer["response"]["output"]]
    assert texts == ["", ""]


def test_a_reward_less_trajectory_has_no_verify_response() -> None:
    failed = _trajectory([], reward=None, outcome="infra_error", status="failed")
    with pytest.raises(ValueError, match="infra_error has no reward"):
        verify_response(failed, ROW, "m")


def test_the_rows_sampling_is_kept_and_checked() -> None:
    chosen = sampling_from({"temperature": 0.3, "top_p": 0.9, "max_output_tokens": 64})
    assert (chosen.temperature, chosen.top_p, chosen.max_tokens) == (0.3, 0.9, 64)
    assert sampling_from({}).temperature == 1.0
    with pytest.raises(ValueError, match="temperature"):
        sampling_from({"temperature": 9.0})
