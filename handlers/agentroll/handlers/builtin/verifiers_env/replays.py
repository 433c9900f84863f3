"""A rollout whose environment code drives the turns, played once more in a fresh worker.

A worker that timed out or died under a rollout (a legacy `rollout()`, a v1 `Env.run`) may
have been starved by a loaded node or killed by the OOM killer: neither is the replies'
doing. So the rollout is played again, each turn the environment asks answered with what the
policy already said to it (`RecordedTurns.replayed`: nothing is sampled twice, the tokens
stay those of the first play), and only a second failure counts against the replies; the
control (`control.py`) then decides whose it is.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentroll.handlers.budget import run_budget
from agentroll.handlers.builtin.verifiers_env.workers import Turns
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import ReplayDiverged, VerifiersWorkerFailure

T = TypeVar("T")
ATTEMPTS_KEY = "verifiers_rollout_attempts"
"""Set where a rollout was played twice (`attempts_shown`)."""


def attempts_shown(ctx: RolloutContext) -> dict[str, int]:
    """`reward_info.rollout_attempts` where the rollout was played twice, else nothing."""
    return {"rollout_attempts": ctx.state[ATTEMPTS_KEY]} if ATTEMPTS_KEY in ctx.state else {}


class RecordedTurns:
    """Answers the environment's turns with `answer`, keeping each turn and its answer."""

    def __init__(self, answer: Turns) -> None:
        self._answer = answer
        self.given: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        """Each turn asked and what it was answered, in order."""

    async def __call__(self, turn: list[dict[str, Any]]) -> dict[str, Any]:
        given = await self._answer(turn)
        self.given.append((turn, given))
        return given

    def replayed(self) -> Turns:
        """Answers the turns once more with what they were answered, and any turn past those
        as before. `ReplayDiverged` where the environment asks another turn than before: the
        replies were sampled on what it said then."""
        given = iter(list(self.given))

        async def again(turn: list[dict[str, Any]]) -> dict[str, Any]:
            before = next(given, None)
            if before is None:
                return await self(turn)
            if before[0] != turn:
                raise ReplayDiverged("the environment said something else the second time")
            return before[1]

        return again


async def played_twice(
    ctx: RolloutContext, play: Callable[[Turns], Awaitable[T]], turns: RecordedTurns
) -> T:
    """`play(turns)`; where its worker timed out or died, `play` once more (in a fresh worker:
    the pool replaced the one that failed) answered by `turns.replayed()`, within what is left
    of RUN's budget, and `ATTEMPTS_KEY` set to 2. Raises the failure that stands: the second
    one where it failed the same way again, else the first (the replay did not fit in the
    budget, or its environment said something else than the first time)."""
    try:
        return await play(turns)
    except VerifiersWorkerFailure as first:
        ctx.state[ATTEMPTS_KEY] = 2
        try:
            async with asyncio.timeout(run_budget(ctx)):
                return await play(turns.replayed())
        except (TimeoutError, ReplayDiverged):
            raise first from None
