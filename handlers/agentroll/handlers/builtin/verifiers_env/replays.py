"""A rollout whose environment code drives the turns, played once more in a fresh worker.

A worker that timed out or died under a rollout (a legacy `rollout()`, a v1 `Env.run`) may
have been starved by a loaded node or killed by the OOM killer: neither is the replies'
doing. So the rollout is played again, each turn the environment asks answered with what the
policy already said to it (`Replay`: nothing is sampled twice, the tokens stay those of the
first play), and only a second failure of the same kind counts against the replies; the
control (`control.py`) then decides whose it is. A replay that cannot say the same (no
budget left for it, no worker free, an environment that asks something else or stops
elsewhere) leaves the first failure standing, as it was before any replay.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentroll.handlers.budget import run_budget
from agentroll.handlers.builtin.verifiers_env.workers import Turns
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import (
    InfraError,
    ReplayDiverged,
    ReplayOutOfTime,
    VerifiersWorkerFailure,
)

T = TypeVar("T")
REPLAY_KEY = "verifiers_replay"
"""What the rollout's `reward_info` shows of its second play (`replay_shown`)."""
NO_WORKER = {"verifiers_workers_busy", "verifiers_worker_unavailable"}
"""A replay refused a worker says nothing of the replies: the first failure stands."""


def two_steps_fit(ctx: RolloutContext, step_s: float) -> bool:
    """Whether RUN's budget can still wait out two of the environment's steps of `step_s`:
    one to the next turn, one to finish once that turn is refused."""
    return run_budget(ctx) >= 2 * step_s


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

    def replayed(self, ctx: RolloutContext, step_s: float) -> "Replay":
        return Replay(self, ctx, step_s)


class Replay:
    """Answers the turns once more with what they were answered, and any turn past those as
    `recorded` does (its own budget check then ends the rollout `wall_time`).
    `ReplayDiverged` where the environment asks another turn than before (the replies were
    sampled on what it said then); `ReplayOutOfTime` where RUN's budget can no longer wait
    out two of the environment's steps of `step_s` (the first play's own limit)."""

    def __init__(self, recorded: RecordedTurns, ctx: RolloutContext, step_s: float) -> None:
        self._recorded, self._ctx, self._step_s = recorded, ctx, step_s
        self._given = list(recorded.given)
        self._answered = 0

    @property
    def exhausted(self) -> bool:
        """Whether the environment asked every turn it asked the first time."""
        return self._answered >= len(self._given)

    def check_budget(self) -> None:
        if not two_steps_fit(self._ctx, self._step_s):
            raise ReplayOutOfTime("RUN's budget cannot hold the replay's next step")

    async def __call__(self, turn: list[dict[str, Any]]) -> dict[str, Any]:
        if self.exhausted:
            return await self._recorded(turn)
        before, given = self._given[self._answered]
        if before != turn:
            raise ReplayDiverged("the environment said something else the second time")
        self.check_budget()
        self._answered += 1
        return given


async def played_twice(
    ctx: RolloutContext,
    play: Callable[[Turns], Awaitable[T]],
    turns: RecordedTurns,
    step_s: float,
) -> T:
    """`play(turns)`; where its worker timed out or died, `play` once more (in a fresh worker:
    the pool replaced the one that failed) answered by a `Replay` of `turns`. Raises the
    failure that stands: the second one where it failed the same way again, else the first.
    No sampling is cut short: the replay's budget is checked between the environment's
    steps, and a new turn is sampled only as on the first play."""
    try:
        return await play(turns)
    except VerifiersWorkerFailure as first:
        replay = turns.replayed(ctx, step_s)
        shown: dict[str, Any] = ctx.state.setdefault(REPLAY_KEY, {})
        try:
            replay.check_budget()
            shown["rollout_attempts"] = 2
            result = await play(replay)
            if not replay.exhausted:
                raise ReplayDiverged("the environment stopped elsewhere the second time")
        except VerifiersWorkerFailure:
            shown["replay"] = "failed again"
            raise
        except ReplayOutOfTime:
            shown["replay"] = "stopped: RUN's budget cannot hold its next step"
            raise first from None
        except ReplayDiverged as exc:
            shown["replay"] = f"not a replay: {exc}"
            raise first from None
        except InfraError as exc:
            if exc.cause not in NO_WORKER:
                raise
            shown["replay"] = f"no worker: {exc}"
            raise first from None
        shown["replay"] = "completed"
        return result


def replay_shown(ctx: RolloutContext) -> dict[str, Any]:
    """Where the first play's worker failed: `replay` (how the second play went) and
    `rollout_attempts` (2, once the second play started); else nothing."""
    return dict(ctx.state.get(REPLAY_KEY, {}))
