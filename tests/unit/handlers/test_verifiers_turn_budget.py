"""RUN's time budget on the turns a verifiers environment's own code drives (a legacy
rollout's model calls, a v1 `vf.Env` episode's turns), against a fake clock that only the
environment's steps advance (no sleeping, no dependence on the machine's speed): the rollout
ends `wall_time` while RUN can still wait out two more steps, not before, and never runs into
RUN's stage timeout."""

from pathlib import Path
from typing import Any

import pytest
from tests.unit.handlers.test_agent_budget import Clock, ClockedContext
from tests.unit.handlers.test_agent_loop import Limits, Session

from agentroll.handlers.builtin.verifiers_env import episodes
from agentroll.handlers.builtin.verifiers_env.legacy import Rollout
from agentroll.handlers.builtin.verifiers_env.workers import Turns

STEP_S = 5.0
"""Each step of the environment's code between two turns."""
SCORE_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 60.0
"""RUN's budget: 60 s less its 6 s margin, 54 s; two steps' limit: 20 s."""


async def environment(answer: Turns, clock: Clock, step_s: float = STEP_S) -> list[Any]:
    """The environment's side: a turn after each step, until a turn is refused."""
    answers: list[Any] = []
    while len(answers) < 100:
        got = await answer([{"role": "user", "content": "again"}])
        answers.append(got.get("reply", got))
        if "reply" not in got:
            break
        clock.now += step_s
    return answers


def context(max_turns: int = 100) -> ClockedContext:
    limits = Limits(max_turns=max_turns, run_timeout_s=RUN_TIMEOUT_S)
    return ClockedContext(Session(["5"] * 100), limits=limits, clock=Clock())


async def play_legacy(ctx: ClockedContext, step_s: float = STEP_S) -> list[Any]:
    rollout = Rollout(ctx, [], SCORE_TIMEOUT_S)  # type: ignore[arg-type]
    return await environment(rollout.turns, ctx.clock, step_s)


async def play_v1(
    ctx: ClockedContext, monkeypatch: pytest.MonkeyPatch, step_s: float = STEP_S
) -> list[Any]:
    answers: list[Any] = []

    async def episode(python: Path, request: Any, timeout_s: float, answer: Turns) -> None:
        answers.extend(await environment(answer, ctx.clock, step_s))

    monkeypatch.setattr(episodes, "_episode", episode)
    opening = [{"role": "user", "content": "play"}]
    failed = await episodes.play_episode(ctx, Path("python"), {}, {}, opening, SCORE_TIMEOUT_S)  # type: ignore[arg-type]
    assert failed is None
    return answers


@pytest.mark.parametrize("form", ["legacy", "v1"])
async def test_a_slow_environment_ends_wall_time_while_two_steps_still_fit(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context()
    answers = await (play_legacy(ctx) if form == "legacy" else play_v1(ctx, monkeypatch))
    # Replies at 0, 5, ..., 30 s; at 35 s 19 s are left, less than two 10 s steps.
    assert answers == ["5"] * 7 + [{"end": "wall_time"}]
    assert ctx.finish_reason == "wall_time"
    assert ctx.agent_time() + 2 * SCORE_TIMEOUT_S <= RUN_TIMEOUT_S


@pytest.mark.parametrize("form", ["legacy", "v1"])
async def test_a_quick_environment_plays_to_its_turn_limit(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(max_turns=12)
    play = play_legacy(ctx, 0.5) if form == "legacy" else play_v1(ctx, monkeypatch, 0.5)
    assert await play == ["5"] * 12 + [{"end": "max_turns"}]
    assert ctx.finish_reason == "max_turns"
