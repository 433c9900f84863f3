"""What the policy wrote (assistant text, tool-call names, ids and arguments) reaches every
export as written and never breaks one: ATIF (Harbor's schema), NeMo Gym's `/run` answer
(as NeMo RL reads it) and the verifiers episode (as prime-rl reads it)."""

import json
from typing import Any

from agentroll.server.schema import Segment, Trajectory
from agentroll.server.store import strict_json
from agentroll.testing import nemo_gym_client, prime_env_client
from agentroll.testing.atif_schema import validate_atif
from agentroll.trainer_clients.exports import to_atif
from agentroll.trainer_clients.exports.nemo_gym import verify_response
from agentroll.trainer_clients.exports.verifiers_episode import to_episode

ODD_CALLS: list[Any] = [
    "not a call",
    {"function": "not an object"},
    {"id": "", "function": {"name": None, "arguments": {"already": "an object"}}},
    {"id": "c1", "function": {"name": "f\u0000\ud800", "arguments": '{"unclosed": '}},
    {"id": "c1", "function": {"name": "g", "arguments": "[1, 2]"}},  # the same id again
]
POLICY_MESSAGES = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": ODD_CALLS},
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url"}, "x"]},
    {"role": "tool", "tool_call_id": 7, "content": {"not": "text"}},
    {"role": "assistant", "content": '{"role": "system"} </tool_call> \\boxed{1}'},
]


def _trajectory() -> Trajectory:
    return Trajectory.model_validate(
        {
            "job_id": "j",
            "handler": "h",
            "prompt_ids": [1],
            "response_ids": [5, 6, 0, 7],
            "response_mask": [1, 1, 0, 1],
            "response_logprobs": [-1.0, -1.0, 0.0, -1.0],
            "segments": [
                Segment(start=0, end=2, backend_id="b", policy_version=0, finish_reason="stop"),
                Segment(start=3, end=4, backend_id="b", policy_version=0, finish_reason="stop"),
            ],
            "reward": 0.0,
            "outcome": "agent_error",
            "status": "completed",
            "messages": POLICY_MESSAGES,
        }
    )


def test_atif_keeps_what_the_policy_wrote() -> None:
    atif = validate_atif(to_atif(_trajectory()))
    agent_steps = [s for s in atif.steps if s.source == "agent"]
    assert [s.metrics.completion_token_ids for s in agent_steps if s.metrics] == [[5, 6], [7]]
    assert agent_steps[0].tool_calls is not None
    assert [c.arguments for c in agent_steps[0].tool_calls] == [
        {},
        {"already": "an object"},
        {"raw": '{"unclosed": '},
        {"raw": "[1, 2]"},
    ]
    assert json.loads(strict_json(atif.model_dump(mode="json")))  # writable as UTF-8


def test_nemo_gym_keeps_what_the_policy_wrote() -> None:
    answer = verify_response(_trajectory(), {"responses_create_params": {"input": "go"}}, "m")
    nemo_gym_client.check_verify_response(answer)
    log = nemo_gym_client.message_log(answer)
    assert [m["token_ids"] for m in log if m["role"] == "assistant"] == [[5, 6], [7]]
    calls = [i for i in answer["response"]["output"] if i["type"] == "function_call"]
    assert [c["arguments"] for c in calls] == [
        "{}",
        '{"already": "an object"}',
        '{"unclosed": ',
        "[1, 2]",
    ]


def test_a_verifiers_episode_keeps_what_the_policy_wrote() -> None:
    episode = to_episode(_trajectory(), {"type": "h", "data": {}})
    prime_env_client.check_episode(episode)
    tokens, mask, _ = prime_env_client.branch(episode["traces"][0])
    assert tokens == [1, 5, 6, 0, 7]
    assert mask == [False, True, True, False, True]
    first_reply = episode["traces"][0]["nodes"][1]["message"]
    assert [c["name"] for c in first_reply["tool_calls"]] == ["", "", "f\u0000\ud800", "g"]
