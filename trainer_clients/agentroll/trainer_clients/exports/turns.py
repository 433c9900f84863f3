"""A trajectory's generation turns, and the assistant messages they produced.

A turn is a run of contiguous segments: one reply, even when a pause split it into several
generation calls. Its prompt is everything the engine read before it (`prompt_ids` and the
response tokens before the turn), so each turn's prompt starts with the previous turn's
prompt and completion: what trainers that rebuild a conversation from turns require.

Turns pair with the assistant messages in order only where their counts agree (the usual
loop); otherwise no pairing is guessed.
"""

from dataclasses import dataclass
from typing import Protocol

from agentroll.server.schema import Segment
from agentroll.server.schema.messages import ChatMessage, ToolSpec


class TokenFields(Protocol):
    """What a `Trajectory` and an `AgentTrace` share."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    segments: list[Segment]
    messages: list[ChatMessage]
    tools: list[ToolSpec]


@dataclass(frozen=True)
class TurnTokens:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    response_start: int
    segments: list[Segment]


def token_turns(tokens: TokenFields) -> list[TurnTokens]:
    grouped: list[list[Segment]] = []
    for segment in tokens.segments:
        if grouped and grouped[-1][-1].end == segment.start:
            grouped[-1].append(segment)
        else:
            grouped.append([segment])
    turns = []
    for turn in grouped:
        start, end = turn[0].start, turn[-1].end
        turns.append(
            TurnTokens(
                prompt_token_ids=tokens.prompt_ids + tokens.response_ids[:start],
                completion_token_ids=tokens.response_ids[start:end],
                logprobs=tokens.response_logprobs[start:end],
                loss_mask=tokens.response_mask[start:end],
                response_start=start,
                segments=turn,
            )
        )
    return turns


Paired = tuple[TurnTokens, ChatMessage | None, list[ChatMessage]]


def leading_messages(tokens: TokenFields) -> list[ChatMessage]:
    """The messages before the first assistant message (system, task)."""
    roles = [m.get("role") for m in tokens.messages]
    first = roles.index("assistant") if "assistant" in roles else len(roles)
    return tokens.messages[:first]


def paired_turns(tokens: TokenFields) -> list[Paired]:
    """Each turn with its assistant message and the messages after it until the next one (tool
    results, user follow-ups); message None and nothing after it where turns and assistant
    messages do not pair."""
    turns = token_turns(tokens)
    replies: list[tuple[ChatMessage, list[ChatMessage]]] = []
    for message in tokens.messages:
        if message.get("role") == "assistant":
            replies.append((message, []))
        elif replies:
            replies[-1][1].append(message)
    if len(replies) != len(turns):
        return [(turn, None, []) for turn in turns]
    return [(turn, m, after) for turn, (m, after) in zip(turns, replies, strict=True)]
