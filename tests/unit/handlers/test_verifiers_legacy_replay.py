"""A legacy rollout played again in a fresh worker (after a timeout or a dead worker) answers
the turns it already answered with the same replies, samples nothing twice, samples on past
them, and stops where the environment says something else than the first time (the replies
were sampled on what it said then)."""

import pytest
from tests.unit.handlers.test_agent_loop import Context, Session

from agentroll.handlers.builtin.verifiers_env.legacy import ReplayDiverged, Rollout


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_a_replay_gives_the_same_replies_then_samples_on() -> None:
    ctx = Context(Session(["5", "8", "7"]))
    rollout = Rollout(ctx, [], 10.0)  # type: ignore[arg-type]
    first = [await rollout.answer(turn("guess")), await rollout.answer(turn("higher"))]
    assert first == [{"reply": "5"}, {"reply": "8"}]

    again = rollout.replayed()
    replayed = [await again(turn("guess")), await again(turn("higher"))]
    assert replayed == first and ctx.llm.num_turns == 2  # nothing sampled twice
    assert await again(turn("lower")) == {"reply": "7"}
    assert ctx.llm.messages[-2:] == [
        {"role": "user", "content": "lower"},
        {"role": "assistant", "content": "7"},
    ]


async def test_a_replay_whose_environment_says_something_else_stops() -> None:
    ctx = Context(Session(["5", "8"]))
    rollout = Rollout(ctx, [], 10.0)  # type: ignore[arg-type]
    await rollout.answer(turn("guess"))
    await rollout.answer(turn("higher"))

    again = rollout.replayed()
    assert await again(turn("guess")) == {"reply": "5"}
    with pytest.raises(ReplayDiverged):
        await again(turn("lower"))
