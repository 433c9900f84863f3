"""`remote_verify` without a server: how each `/verify` answer maps onto an outcome, how a
row becomes the policy's prompt, and the Responses object the policy's work becomes."""

import math
from typing import Any

import pytest

from agentroll.handlers.builtin.remote_verify.handler import (
    VerifierSpec,
    other_fields,
    row_messages,
    verdict,
)
from agentroll.handlers.builtin.remote_verify.resources_client import VerifierFailure, encoded
from agentroll.handlers.builtin.remote_verify.responses_output import response_object

SPEC = VerifierSpec(url="http://127.0.0.1:1", infra_failure_reasons=["gold_execution_error"])


@pytest.mark.parametrize(
    ("answer", "reward", "mask"),
    [
        ({"reward": 1.0}, 1.0, False),
        ({"reward": 0}, 0.0, False),
        ({"reward": 0.25, "mask_sample": True}, 0.25, True),
        ({"reward": 1.0, "mask_sample": None}, 1.0, False),
        ({"reward": 0.0, "failure_kind": "format_error", "failure_reason": "none"}, 0.0, False),
        ({"reward": 0.0, "failure_kind": "", "failure_reason": "wrong"}, 0.0, False),
        ({"reward": 0.0, "failure_reason": "execution_error"}, 0.0, False),
    ],
)
def test_answers_that_carry_a_reward(answer: dict[str, Any], reward: float, mask: bool) -> None:
    given = verdict(answer, SPEC)
    assert (given.value, given.info["mask_sample"]) == (reward, mask)
    assert given.info["failure_kind"] == (answer.get("failure_kind") or None)


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        ({"reward": 0.0, "_ng_failure_class": "judge_failed"}, "verifier_reported_failure"),
        ({"reward": 0.0, "_ng_failure_class": "transient"}, "verifier_reported_failure"),
        ({"reward": 0.0, "failure_kind": "environment_error"}, "verifier_reported_failure"),
        ({"reward": 1.0, "failure_kind": "never_heard_of_it"}, "verifier_reported_failure"),
        ({"reward": 0.0, "failure_reason": "gold_execution_error"}, "verifier_reported_failure"),
        ({}, "verifier_bad_reward"),
        ({"reward": None}, "verifier_bad_reward"),
        ({"reward": "1.0"}, "verifier_bad_reward"),
        ({"reward": True}, "verifier_bad_reward"),
        ({"reward": math.nan}, "verifier_bad_reward"),
        ({"reward": math.inf}, "verifier_bad_reward"),
        ({"reward": 1.0, "mask_sample": "yes"}, "verifier_bad_answer"),
    ],
)
def test_answers_that_carry_no_reward_are_infrastructure(
    answer: dict[str, Any], cause: str
) -> None:
    with pytest.raises(VerifierFailure) as caught:
        verdict(answer, SPEC)
    assert caught.value.cause == cause


def test_the_policys_failure_kinds_are_the_jobs_to_name() -> None:
    answer = {"reward": 0.0, "failure_kind": "tool_misuse"}
    with pytest.raises(VerifierFailure):
        verdict(answer, SPEC)
    spec = SPEC.model_copy(update={"policy_failure_kinds": ["tool_misuse"]})
    assert verdict(answer, spec).value == 0.0


def test_a_row_becomes_the_policys_prompt() -> None:
    row = {
        "responses_create_params": {
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Answer in digits."},
                {"role": "user", "content": [{"type": "input_text", "text": "6*7?"}]},
            ],
        }
    }
    assert row_messages(row) == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in digits."},
        {"role": "user", "content": "6*7?"},
    ]
    plain = {"responses_create_params": {"input": "6*7?"}}
    assert row_messages(plain) == [{"role": "user", "content": "6*7?"}]


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({}, "input must be text or a list"),
        ({"input": [{"role": "system", "content": "hi"}]}, "no user message"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "only messages"),
        ({"input": [{"role": "tool", "content": "x"}]}, "role must be one of"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "only text content",
        ),
    ],
)
def test_rows_the_handler_cannot_prompt_with_are_refused(
    params: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        row_messages({"responses_create_params": params})


def test_the_policys_work_as_a_responses_object() -> None:
    conversation = [
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "python", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "python", "content": "42"},
        {"role": "user", "content": "Please give your final answer."},
        {"role": "assistant", "content": "", "tool_calls": []},
    ]
    response = response_object(conversation, "42", "42", "policy")
    assert response["object"] == "response" and response["model"] == "policy"
    kinds = [(i["type"], i.get("call_id")) for i in response["output"]]
    assert kinds == [
        ("message", None),
        ("function_call", "c1"),
        ("function_call_output", "c1"),
        ("message", None),
    ]
    final = response["output"][-1]
    assert final["role"] == "assistant" and final["content"][0]["text"] == "42"
    assert len({i.get("id") for i in response["output"] if "id" in i}) == 3


def test_an_unrecorded_conversation_is_one_message_with_the_answer() -> None:
    response = response_object([], None, "the answer", "m")
    assert [i["content"][0]["text"] for i in response["output"]] == ["the answer"]


def test_only_short_new_scalars_of_an_answer_are_kept() -> None:
    sent = {"responses_create_params": {}, "expected_answer": "42", "response": None}
    answer = {
        **sent,
        "reward": 1.0,
        "resolved": True,
        "extracted_answer": "4" * 500,
        "details": {"nested": 1},
        "nan": math.nan,
    }
    assert other_fields(answer, sent) == {"resolved": True, "extracted_answer": "4" * 200}


def test_text_the_policy_sampled_is_always_encodable() -> None:
    body = encoded({"response": response_object([], None, "half a pair: \ud83d", "m")})
    assert b"\\ud83d" in body
