"""A rollout whose environment drives the turns (a legacy rollout, a v1 episode), played again
in a fresh worker after a timeout or a dead worker: the turns it already answered get the same
replies, nothing is sampled twice, it samples on past them, and it stops where the environment
says something else than the first time (the replies were sampled on what it said then).
Only a second failure of the same kind stands; a replay that does not fit in RUN's budget or
diverges leaves the first."""

import asyncio
from typing import Any

import pytest
from tests.unit.handlers.test_agent_budget import ClockedContext
from tests.unit.handlers.test_agent_loop import Context, Limits, Session

from agentroll.handlers.builtin.verifiers_env.legacy import Rollout
from agentroll.handlers.builtin.verifiers_env.replays import (
    RecordedTurns,
    attempts_shown,
    played_twice,
)
from agentroll.handlers.builtin.verifiers_env.workers import Turns
from agentroll.handlers.errors import ReplayDiverged, VerifiersWorkerFailure


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_a_replay_gives_the_same_replies_then_samples_on() -> None:
    ctx = Context(Session(["5", "8", "7"]))
    rollout = Rollout(ctx, [], 10.0)  # type: ignore[arg-type]
    first = [await rollout.turns(turn("guess")), await rollout.turns(turn("higher"))]
    assert first == [{"reply": "5"}, {"reply": "8"}]

    again = rollout.turns.replayed()
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
    await rollout.turns(turn("guess"))
    await rollout.turns(turn("higher"))

    again = rollout.turns.replayed()
    assert await again(turn("guess")) == {"reply": "5"}
    with pytest.raises(ReplayDiverged):
        await again(turn("lower"))


class Game:
    """An environment of `rounds` turns whose worker fails as told on each play."""

    def __init__(self, failures: list[str | None], rounds: int = 3) -> None:
        self.failures, self.rounds, self.plays = failures, rounds, 0
        self.heard: list[list[Any]] = []

    async def play(self, answer: Turns) -> str:
        failure = self.failures[self.plays]
        self.plays += 1
        heard = []
        for k in range(self.rounds):
            await asyncio.sleep(0)  # the worker's step: the loop runs others meanwhile
            if failure == "diverge" and k == 1:
                await answer(turn("something else"))
            heard.append((await answer(turn(f"round {k}")))["reply"])
            if failure in ("timeout", "crashed") and k == 1:
                raise VerifiersWorkerFailure(failure, f"play {self.plays}")
        self.heard.append(heard)
        return "done"


def sampled(replies: int) -> tuple[ClockedContext, RecordedTurns]:
    ctx = ClockedContext(Session([str(k) for k in range(replies)]), limits=Limits())

    async def answer(said: list[dict[str, Any]]) -> dict[str, Any]:
        if not ctx.llm.messages:
            await ctx.llm.start(said)
        else:
            await ctx.llm.add_messages(said)
        return {"reply": (await ctx.llm.generate()).text}

    return ctx, RecordedTurns(answer)


async def test_a_worker_lost_once_plays_the_rollout_again_with_the_same_replies() -> None:
    ctx, turns = sampled(3)
    game = Game(["crashed", None])
    assert await played_twice(ctx, game.play, turns) == "done"
    assert game.heard == [["0", "1", "2"]]  # the first two replayed, the third sampled on
    assert ctx.llm.num_turns == 3
    assert attempts_shown(ctx) == {"rollout_attempts": 2}


async def test_a_rollout_played_once_shows_no_attempts() -> None:
    ctx, turns = sampled(3)
    assert await played_twice(ctx, Game([None]).play, turns) == "done"
    assert attempts_shown(ctx) == {}


async def test_a_second_failure_stands() -> None:
    ctx, turns = sampled(3)
    with pytest.raises(VerifiersWorkerFailure, match="play 2") as failed:
        await played_twice(ctx, Game(["crashed", "timeout"]).play, turns)
    assert failed.value.kind == "timeout"


async def test_a_replay_that_diverges_leaves_the_first_failure() -> None:
    ctx, turns = sampled(3)
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, Game(["timeout", "diverge"]).play, turns)


async def test_a_replay_with_no_budget_left_leaves_the_first_failure() -> None:
    ctx, turns = sampled(3)
    ctx.clock.now += Limits().run_timeout_s  # RUN's budget is spent
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, Game(["crashed", None]).play, turns)
