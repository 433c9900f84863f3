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
    played_twice,
    replay_shown,
)
from agentroll.handlers.builtin.verifiers_env.workers import Turns
from agentroll.handlers.errors import InfraError, ReplayDiverged, VerifiersWorkerFailure


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_a_replay_gives_the_same_replies_then_samples_on() -> None:
    ctx = Context(Session(["5", "8", "7"]))
    rollout = Rollout(ctx, [], 10.0)  # type: ignore[arg-type]
    first = [await rollout.turns(turn("guess")), await rollout.turns(turn("higher"))]
    assert first == [{"reply": "5"}, {"reply": "8"}]

    again = rollout.turns.replayed(ctx, 10.0)
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

    again = rollout.turns.replayed(ctx, 10.0)
    assert await again(turn("guess")) == {"reply": "5"}
    with pytest.raises(ReplayDiverged):
        await again(turn("lower"))


STEP_S = 10.0
"""The environment's own limit on each of its steps (`score_timeout_s`)."""


class Game:
    """An environment of `rounds` turns whose worker fails as told on each play (at its second
    turn), each of its steps taking `step_s` of RUN's time."""

    def __init__(self, ctx: ClockedContext, failures: list[str | None], step_s: float = 0) -> None:
        self.ctx, self.failures, self.step_s, self.plays = ctx, failures, step_s, 0
        self.heard: list[list[Any]] = []

    async def play(self, answer: Turns) -> str:
        failure = self.failures[self.plays]
        self.plays += 1
        if failure == "busy":
            raise InfraError("every verifiers worker stayed busy", cause="verifiers_workers_busy")
        if failure == "load":
            raise InfraError("the environment no longer loads", cause="verifiers_load_failed")
        heard = []
        for k in range(3):
            await asyncio.sleep(0)  # the worker's step: the loop runs others meanwhile
            self.ctx.clock.now += self.step_s
            if failure == "diverge" and k == 1:
                await answer(turn("something else"))
            heard.append((await answer(turn(f"round {k}")))["reply"])
            if failure in ("timeout", "crashed") and k == 1:
                raise VerifiersWorkerFailure(failure, f"play {self.plays}")
            if failure == "short" and k == 0:
                break
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
    game = Game(ctx, ["crashed", None])
    assert await played_twice(ctx, game.play, turns, STEP_S) == "done"
    assert game.heard == [["0", "1", "2"]]  # the first two replayed, the third sampled on
    assert ctx.llm.num_turns == 3
    assert replay_shown(ctx) == {"rollout_attempts": 2, "replay": "completed"}


async def test_a_rollout_played_once_shows_no_replay() -> None:
    ctx, turns = sampled(3)
    assert await played_twice(ctx, Game(ctx, [None]).play, turns, STEP_S) == "done"
    assert replay_shown(ctx) == {}


async def test_a_second_failure_stands() -> None:
    ctx, turns = sampled(3)
    with pytest.raises(VerifiersWorkerFailure, match="play 2") as failed:
        await played_twice(ctx, Game(ctx, ["crashed", "timeout"]).play, turns, STEP_S)
    assert failed.value.kind == "timeout"
    assert replay_shown(ctx) == {"rollout_attempts": 2, "replay": "failed again"}


@pytest.mark.parametrize("second", ["diverge", "short"])
async def test_a_replay_that_asks_or_stops_elsewhere_leaves_the_first_failure(
    second: str,
) -> None:
    ctx, turns = sampled(3)
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, Game(ctx, ["timeout", second]).play, turns, STEP_S)
    assert replay_shown(ctx)["replay"].startswith("not a replay")


async def test_a_replay_refused_a_worker_leaves_the_first_failure() -> None:
    ctx, turns = sampled(3)
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, Game(ctx, ["crashed", "busy"]).play, turns, STEP_S)
    assert replay_shown(ctx)["replay"].startswith("no worker")


async def test_an_environment_that_no_longer_loads_is_infra() -> None:
    ctx, turns = sampled(3)
    with pytest.raises(InfraError) as failed:
        await played_twice(ctx, Game(ctx, ["crashed", "load"]).play, turns, STEP_S)
    assert failed.value.cause == "verifiers_load_failed"


async def test_with_no_budget_left_the_replay_is_not_played() -> None:
    ctx, turns = sampled(3)
    game = Game(ctx, ["crashed", None])
    ctx.clock.now += Limits().run_timeout_s  # RUN's budget is spent
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, game.play, turns, STEP_S)
    assert game.plays == 1
    assert replay_shown(ctx) == {"replay": "stopped: RUN's budget cannot hold its next step"}


async def test_a_replay_the_budget_cannot_finish_stops_between_steps() -> None:
    """Each of the environment's steps takes a fifth of RUN's budget: the replay stops before
    a step the budget cannot wait out twice, never in the middle of one."""
    ctx, turns = sampled(3)
    step_s = Limits().run_timeout_s / 5
    with pytest.raises(VerifiersWorkerFailure, match="play 1"):
        await played_twice(ctx, Game(ctx, ["crashed", None], step_s).play, turns, step_s)
    assert replay_shown(ctx) == {
        "rollout_attempts": 2,
        "replay": "stopped: RUN's budget cannot hold its next step",
    }
    assert ctx.llm.num_turns == 2  # nothing sampled by the replay
