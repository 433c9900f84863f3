"""A trajectory as a verifiers v1 episode: what prime-rl's orchestrator trains on.

Written from verifiers at commit a60a606 (`verifiers/v1/episode.py`: `Episode`;
`verifiers/v1/trace.py`: `Trace`, `Branch`, `Reward`, `Error`; `verifiers/v1/graph.py`:
`MessageNode`; `verifiers/v1/types.py`: the messages). One trace per agent (a single-agent
trajectory is one trace). Its nodes form one path whose token spans, concatenated, are the
exact token stream the engine read and sampled:

- each message is a node; the tokens agentroll recorded between two replies (the prompt
  before the first, tool output and template glue after each) ride on the last message node
  before the next reply, unsampled; with no such message they lead that reply's own node;
- each generation turn (contiguous segments) is a sampled assistant node: its tokens,
  `mask` from `response_mask`, `logprobs` for the masked-in tokens;
- tokens after the last reply (never read by the model) are left out.

The reward is the trace's one reward `reward` (score = agentroll's reward, weight 1). An
outcome without a reward is an episode with `ok` false, its error, and no trace: prime-rl
drops it, never trains on it as 0. Mapping: docs/trainers_out.md.
"""

import uuid
from typing import Any

from agentroll.server.schema import AgentTrace, Trajectory
from agentroll.server.schema.messages import ChatMessage
from agentroll.trainer_clients.exports.messages import content_text, tool_calls
from agentroll.trainer_clients.exports.turns import TokenFields, leading_messages, paired_turns

TRACE_VERSION = 1


def _message(message: ChatMessage) -> dict[str, Any]:
    """An OpenAI-style message as a verifiers v1 message (system, user, assistant, tool)."""
    role = message.get("role")
    if role == "assistant":
        calls = [
            {"id": call.call_id or "", "name": call.name, "arguments": call.arguments_text()}
            for call in tool_calls(message)
        ]
        return {
            "role": "assistant",
            "content": content_text(message.get("content")),
            "tool_calls": calls or None,
        }
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": str(message.get("tool_call_id") or ""),
            "content": content_text(message.get("content")),
        }
    return {
        "role": "system" if role == "system" else "user",
        "content": content_text(message.get("content")),
    }


def _node(message: dict[str, Any]) -> dict[str, Any]:
    return {"parent": None, "message": message, "token_ids": [], "mask": [], "logprobs": []}


def nodes(tokens: TokenFields) -> list[dict[str, Any]]:
    """The trace's message graph: one path, token spans as the module docstring says."""
    paired = paired_turns(tokens)
    out: list[dict[str, Any]] = []

    def add(node: dict[str, Any]) -> None:
        node["parent"] = len(out) - 1 if out else None
        out.append(node)

    pending = leading_messages(tokens) if paired and paired[0][1] is not None else []
    stream = tokens.prompt_ids + tokens.response_ids
    seen = 0  # tokens of the stream placed so far
    for turn, reply, after in paired:
        for message in pending:
            add(_node(_message(message)))
        start = len(tokens.prompt_ids) + turn.response_start
        glue = stream[seen:start]
        if pending:  # the tokens since the last reply ride on the last message before this one
            out[-1].update(token_ids=glue, mask=[False] * len(glue))
            glue = []
        kept = [bool(m) for m in turn.loss_mask]
        reply_node = _node(_message(reply or {"role": "assistant", "content": ""}))
        reply_node.update(
            sampled=True,
            token_ids=glue + turn.completion_token_ids,
            mask=[False] * len(glue) + kept,
            logprobs=[lp for lp, keep in zip(turn.logprobs, kept, strict=True) if keep],
        )
        add(reply_node)
        seen = start + len(turn.completion_token_ids)
        pending = after
    for message in pending:  # the last observations: never read by the model, no tokens
        add(_node(_message(message)))
    return out


def _trace(
    tokens: TokenFields,
    *,
    reward: float,
    name: str,
    trainable: bool,
    task: dict[str, Any],
    stop: str | None,
) -> dict[str, Any]:
    return {
        "version": TRACE_VERSION,
        "id": uuid.uuid4().hex,
        "task": task,
        "agent": {"config": {}, "name": name, "trainable": trainable},
        "tools": [
            {
                "name": str(t.get("function", t).get("name", "")),
                "description": str(t.get("function", t).get("description", "")),
                "parameters": t.get("function", t).get("parameters", {}),
            }
            for t in tokens.tools
            if isinstance(t.get("function", t), dict)
        ],
        "nodes": nodes(tokens),
        "rewards": {"reward": {"score": reward, "weight": 1.0}},
        "is_completed": True,
        "ok": True,
        "stop_condition": stop,
        "errors": [],
    }


def to_episode(
    trajectory: Trajectory, task: dict[str, Any], env_id: str = "agentroll"
) -> dict[str, Any]:
    """`trajectory` as a verifiers v1 `Episode` (a JSON object); `task` is the episode's
    `TraceTask` (`{"type", "data"}`), echoed as the run request gave it."""
    episode: dict[str, Any] = {
        "id": trajectory.job_id,
        "env": {"id": env_id},
        "task": task,
        "ok": False,
        "errors": [],
        "traces": [],
    }
    if trajectory.reward is None:
        error = trajectory.error
        episode["errors"] = [
            {
                "type": error.type if error else trajectory.outcome.value,
                "message": error.message if error else f"outcome {trajectory.outcome.value}",
            }
        ]
        return episode
    stop = trajectory.finish_reason
    agents: list[AgentTrace] = trajectory.agents or []
    if agents:
        episode["traces"] = [
            _trace(
                agent,
                reward=trajectory.reward if agent.reward is None else agent.reward,
                name=agent.name,
                trainable=agent.trainable,
                task=task,
                stop=stop,
            )
            for agent in agents
        ]
    else:
        episode["traces"] = [
            _trace(
                trajectory,
                reward=trajectory.reward,
                name="agent",
                trainable=True,
                task=task,
                stop=stop,
            )
        ]
    episode["ok"] = True
    return episode
