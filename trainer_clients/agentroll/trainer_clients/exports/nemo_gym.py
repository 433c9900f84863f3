"""NeMo Gym's agent protocol (`POST /run`): a dataset row in, a verify response out.

Written from NeMo Gym at commit 07d6b0d (`nemo_gym/base_resources_server.py`:
`BaseRunRequest`, `BaseVerifyResponse`; `nemo_gym/openai_utils.py`: the output items and
`TokenIDLogProbMixin`), and from how NeMo RL reads the answer (commit 7ea279a,
`nemo_rl/environments/nemo_gym.py`, `_postprocess_nemo_gym_to_nemo_rl_result`): it keeps the
output items that carry `generation_token_ids`, requires each one's `prompt_token_ids` to
start with every token seen before, and trains on the generation tokens.

One generation turn of the trajectory (contiguous segments, as in the ATIF export) is one
model response: its assistant text and tool calls as Responses-API output items, the token
fields on the last item of the turn (where NeMo Gym's own agents put them), the tool results
after it as `function_call_output` items. Mapping and outcomes: docs/trainers_out.md.
"""

import time
from typing import Any

from agentroll.server.schema import SamplingParams, Trajectory
from agentroll.server.schema.messages import ChatMessage
from agentroll.trainer_clients.exports.messages import content_text, tool_calls
from agentroll.trainer_clients.exports.turns import TurnTokens, paired_turns

ROW_KEYS_NOT_INSTANCE = frozenset({"agent_ref", "responses_create_params"})
"""A row's routing and request: every other field is the task instance."""


def sampling_from(params: dict[str, Any]) -> SamplingParams:
    """The row's `responses_create_params` sampling, agentroll's defaults where it names none."""
    chosen = {
        "temperature": params.get("temperature"),
        "top_p": params.get("top_p"),
        "max_tokens": params.get("max_output_tokens"),
    }
    return SamplingParams.model_validate({k: v for k, v in chosen.items() if v is not None})


def instance_from(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ROW_KEYS_NOT_INSTANCE}


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_items(message: ChatMessage | None, item_id: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{item_id}-call-{call.index}",
            "type": "function_call",
            "call_id": call.call_id or f"{item_id}-call-{call.index}",
            "name": call.name,
            "arguments": call.arguments_text(),
            "status": "completed",
        }
        for call in tool_calls(message)
    ]


def _text(message: ChatMessage | None) -> str:
    return content_text(message.get("content") if message else None)


def output_items(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's turns as Responses-API output items, tokens on each turn's last."""
    items: list[dict[str, Any]] = []
    for index, (turn, message, observations) in enumerate(paired_turns(trajectory)):
        item_id = f"{trajectory.job_id}-turn-{index}"
        turn_items = _call_items(message, item_id)
        if _text(message) or not turn_items:
            turn_items.insert(0, _message_item(item_id, _text(message)))
        turn_items[-1].update(_token_fields(turn))
        items += turn_items
        items += [
            {
                "type": "function_call_output",
                "call_id": str(o.get("tool_call_id", "")),
                "output": _text(o),
            }
            for o in observations
            if o.get("role") == "tool"
        ]
    return items


def _token_fields(turn: TurnTokens) -> dict[str, Any]:
    return {
        "prompt_token_ids": turn.prompt_token_ids,
        "generation_token_ids": turn.completion_token_ids,
        "generation_log_probs": turn.logprobs,
    }


def verify_response(trajectory: Trajectory, row: dict[str, Any], model: str) -> dict[str, Any]:
    """The `/run` answer for a scored trajectory: the row echoed, the response, the reward."""
    if trajectory.reward is None:
        raise ValueError(f"{trajectory.job_id}: outcome {trajectory.outcome.value} has no reward")
    params = row.get("responses_create_params") or {}
    answer: dict[str, Any] = {
        **row,
        "response": {
            "id": f"resp-{trajectory.job_id}",
            "object": "response",
            "created_at": float(int(time.time())),
            "model": model,
            "output": output_items(trajectory),
            "parallel_tool_calls": bool(params.get("parallel_tool_calls", True)),
            "tool_choice": params.get("tool_choice", "auto"),
            "tools": params.get("tools", []),
            "status": "completed" if trajectory.outcome.value == "ok" else "incomplete",
        },
        "reward": trajectory.reward,
        "agentroll": {
            "job_id": trajectory.job_id,
            "outcome": trajectory.outcome.value,
            "finish_reason": trajectory.finish_reason,
            "policy_versions": trajectory.policy_versions,
        },
    }
    if trajectory.reward_components:
        answer["reward_components"] = trajectory.reward_components
    return answer
