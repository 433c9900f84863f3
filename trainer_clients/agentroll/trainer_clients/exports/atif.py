"""A stored trajectory as ATIF, Harbor's Agent Trajectory Interchange Format.

The readable conversation (`messages`) becomes ATIF steps: system, user and assistant
messages in order, tool results as the observation of the agent step that called them.
The exact tokens ride on the agent steps' `metrics`: one *turn* is a run of contiguous
segments (a turn split by a pause is one reply), and its metrics hold what that generation
call read (`prompt_token_ids`: the prompt plus every response token before the turn), what it
sampled (`completion_token_ids`, `logprobs`) and, in `extra`, the loss mask and each
segment's policy version, backend and finish reason.

Turns are paired with assistant messages in order only where their counts agree (the usual
loop). Where they do not (a handler wrote assistant messages no generation call produced,
or a harness's own transcript), no pairing is guessed: the steps carry no metrics and the
turns are kept whole in the root `extra.agentroll.turns`, so no token is ever attached to
text it did not produce.

Reward and outcome have no ATIF field: they are in the root `extra.agentroll`, the reward
`null` for an `infra_error` exactly as in the trajectory. Mapping table: docs/trainers_out.md.
"""

import json
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from agentroll.server.schema import AgentTrace, Trajectory
from agentroll.server.schema.messages import ChatMessage
from agentroll.trainer_clients.exports.messages import content_text, tool_calls
from agentroll.trainer_clients.exports.turns import TokenFields, TurnTokens, token_turns

ATIF_VERSION = "ATIF-v1.6"
"""What a single-agent export declares; one with embedded agents declares the version that
added `subagent_trajectories`."""
ATIF_SUBAGENTS_VERSION = "ATIF-v1.7"
AGENT_NAME = "agentroll"


@cache  # reading the installed metadata costs more than a whole conversion
def _agentroll_version() -> str:
    try:
        return version("agentroll")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "unknown"


def _turn_record(turn: TurnTokens) -> dict[str, Any]:
    return {
        "prompt_token_ids": turn.prompt_token_ids,
        "completion_token_ids": turn.completion_token_ids,
        "logprobs": turn.logprobs,
        "extra": {
            "response_start": turn.response_start,
            "loss_mask": turn.loss_mask,
            "segments": [s.model_dump(mode="json") for s in turn.segments],
        },
    }


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": len(record["prompt_token_ids"]),
        "completion_tokens": len(record["completion_token_ids"]),
        **record,
    }


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as the object ATIF wants; what the policy wrote that is not a JSON
    object is kept verbatim under `raw` rather than dropped or repaired."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"raw": raw}
        return parsed if isinstance(parsed, dict) else {"raw": raw}
    return {"raw": raw}


def _tool_calls(message: ChatMessage, step_id: int) -> list[dict[str, Any]] | None:
    calls = [
        {
            "tool_call_id": call.call_id or f"{step_id}-{call.index}",
            "function_name": call.name,
            "arguments": _arguments(call.arguments),
        }
        for call in tool_calls(message)
    ]
    return calls or None


def _steps(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            _observe(steps, message)
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": {"assistant": "agent", "system": "system"}.get(str(role), "user"),
            "message": content_text(message.get("content")),
        }
        if step["source"] == "agent":
            if isinstance(message.get("reasoning_content"), str):
                step["reasoning_content"] = message["reasoning_content"]
            step["tool_calls"] = _tool_calls(message, step["step_id"])
        elif role not in ("system", "user"):
            step["extra"] = {"role": role}
        steps.append({k: v for k, v in step.items() if v is not None})
    return steps


def _observe(steps: list[dict[str, Any]], message: ChatMessage) -> None:
    """A tool result joins the observation of the agent step that called it; one that answers
    no call of the step before it (or comes first) is a system step's observation."""
    last = steps[-1] if steps else None
    call_id = message.get("tool_call_id")
    known = {c["tool_call_id"] for c in (last or {}).get("tool_calls", [])}
    result: dict[str, Any] = {"content": content_text(message.get("content"))}
    if last is not None and last["source"] == "agent" and call_id in known:
        result["source_call_id"] = call_id
        last.setdefault("observation", {"results": []})["results"].append(result)
        return
    steps.append(
        {
            "step_id": len(steps) + 1,
            "source": "system",
            "message": "tool result",
            "observation": {"results": [result]},
            "extra": {"role": "tool", "tool_call_id": call_id},
        }
    )


def _trajectory(
    tokens: TokenFields, session_id: str, agent_name: str, root_extra: dict[str, Any]
) -> dict[str, Any]:
    steps = _steps(tokens.messages)
    records = [_turn_record(turn) for turn in token_turns(tokens)]
    agent_steps = [s for s in steps if s["source"] == "agent"]
    notes = None
    if records and len(records) == len(agent_steps):
        for step, record in zip(agent_steps, records, strict=True):
            step["metrics"] = _metrics(record)
    elif records:
        notes = (
            f"{len(records)} generation turns for {len(agent_steps)} assistant messages: "
            "token metrics are in extra.agentroll.turns, not paired with steps"
        )
        root_extra = {**root_extra, "turns": records}
    if not steps:  # ATIF wants at least one step: say why there is none
        steps = [{"step_id": 1, "source": "system", "message": "(no messages recorded)"}]
    document: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": session_id,
        "agent": {"name": agent_name, "version": _agentroll_version()},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(len(r["prompt_token_ids"]) for r in records),
            "total_completion_tokens": sum(len(r["completion_token_ids"]) for r in records),
            "total_steps": len(steps),
        },
        "extra": {"agentroll": root_extra},
    }
    if tokens.tools:
        document["agent"]["tool_definitions"] = tokens.tools
    if notes:
        document["notes"] = notes
    return document


def _outcome(trajectory: Trajectory) -> dict[str, Any]:
    fields = (
        "job_id",
        "group_id",
        "handler",
        "outcome",
        "status",
        "finish_reason",
        "reward",
        "reward_components",
        "reward_info",
        "error",
        "policy_versions",
        "logprobs",
        "metadata",
    )
    dumped = trajectory.model_dump(mode="json", include=set(fields))
    return {"schema_version": trajectory.schema_version, **{f: dumped.get(f) for f in fields}}


def _agent_extra(trace: AgentTrace) -> dict[str, Any]:
    return trace.model_dump(
        mode="json", include={"name", "policy", "trainable", "reward", "policy_versions"}
    )


def to_atif(trajectory: Trajectory) -> dict[str, Any]:
    """`trajectory` as one ATIF document (a JSON object); a multi-agent episode embeds one
    subagent trajectory per agent, its `trajectory_id` `<job_id>/<agent name>`."""
    document = _trajectory(trajectory, trajectory.job_id, AGENT_NAME, _outcome(trajectory))
    if trajectory.agents is None:
        return document
    document["schema_version"] = ATIF_SUBAGENTS_VERSION
    document["subagent_trajectories"] = [
        {
            **_trajectory(
                trace, trajectory.job_id, f"{AGENT_NAME}:{trace.name}", _agent_extra(trace)
            ),
            "schema_version": ATIF_SUBAGENTS_VERSION,
            "trajectory_id": f"{trajectory.job_id}/{trace.name}",
        }
        for trace in trajectory.agents
    ]
    return document
