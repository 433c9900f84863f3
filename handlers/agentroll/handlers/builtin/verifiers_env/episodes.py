"""A taskset whose package exports its own `vf.Env`: the environment's code drives the turns.

verifiers v1's counterpart of the legacy `env_response` is an `Env` subclass whose
`run(task, agents)` opens `agents.<name>.interaction(task)` and calls `turn(message)`: each
turn hands the policy the environment's message(s) and returns its reply, and the
environment decides what comes next (feedback, a next question) and when it is over. Here
`run` runs in a verifiers worker, in a child forked for the episode (`worker.py`), with the
policy as its one agent: each turn comes to the server as `{"turn": messages}`, the policy's
reply is sampled through the rollout's session (`ctx.llm`: agentroll's exact tokens, the
environment's messages between them masked out) and goes back as `{"reply": text}`. Once the
rollout's `limits.max_turns` is reached the next turn is answered `{"end": "max_turns"}`, which
the environment sees as a terminated segment; so is a turn asked once RUN's time budget
(`budget.run_budget`) can no longer wait out two more of the environment's steps
(`{"end": "wall_time"}`, `out_of_time`). The conversation is then scored as any rollout's
(EVAL, `handler`).

Whose fault a failure is: where the episode's worker timed out (the environment's code ran
past `score_timeout_s` between two turns) or died, the episode is first played once more in a
fresh worker with the replies already sampled (`replays`: a loaded node or the OOM killer is
not the replies' doing). The environment's code raised, or failed so twice: blamed by a
control (`control.py`), the same episode played with an empty reply to every turn (answered
by the server, each wait for the worker bounded as the policy's are: `empty_replies`). If the
control completes, the policy's replies broke it: ok, reward 0, `reason:
"environment_failed_on_answer"`; if it fails too, infra_error `verifiers_env_failed`.
"""

from pathlib import Path
from typing import Any, cast

from agentroll.handlers.builtin.control import ControlResult
from agentroll.handlers.builtin.verifiers_env.replays import (
    RecordedTurns,
    played_twice,
    two_steps_fit,
)
from agentroll.handlers.builtin.verifiers_env.workers import Turns, asked, load_failure
from agentroll.handlers.context import RolloutContext
from agentroll.handlers.errors import InfraError, VerifiersWorkerFailure
from agentroll.server.schema.messages import ChatMessage

ENV_FAILED = "verifiers_env_failed"


def out_of_time(ctx: RolloutContext, score_timeout_s: float) -> bool:
    """Whether the policy's next reply would leave RUN too little time, marking the rollout
    `wall_time` if so: after it the environment's code may run up to `score_timeout_s` to its
    next turn, and as long again to finish once that turn is refused, all within RUN's budget
    (a rollout RUN's stage timeout stops is `timed_out`: dropped, never graded)."""
    if two_steps_fit(ctx, score_timeout_s):
        return False
    ctx.set_finish_reason("wall_time")
    return True


def empty_replies(max_turns: int) -> Turns:
    """A control's side of the turns: an empty reply to each of the first `max_turns`, then
    the end. Answered by the server as the policy's replies are, so each of the environment's
    steps gets the same time as on the policy's run, not the whole episode one step's."""
    asked = 0

    async def answer(turn: list[dict[str, Any]]) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"reply": ""} if asked <= max_turns else {"end": "max_turns"}

    return answer


def _environment_messages(turn: list[dict[str, Any]]) -> list[ChatMessage]:
    return [cast(ChatMessage, {"role": m["role"], "content": m.get("content") or ""}) for m in turn]


async def _episode(
    python: Path, request: dict[str, Any], timeout_s: float, answer: Turns, control: bool = False
) -> str | None:
    """None when the environment's `run` completed, else what failed; `VerifiersWorkerFailure`
    where its worker timed out or died. `control`: `answer` is a control's, answered at once
    (the request takes no episode's worker slot)."""
    reply = await asked(python, request, timeout_s, answer, answer_waits=not control)
    if reply.get("ok"):
        return None
    if reply.get("stage") == "load":
        raise load_failure(reply)
    return f"the environment's run() failed: {reply.get('error')}"[:4000]


def _worker_failed(exc: VerifiersWorkerFailure) -> str:
    return f"the environment's code {exc.kind}: {exc}"


async def play_episode(
    ctx: RolloutContext,
    python: Path,
    taskset: dict[str, Any],
    task: dict[str, Any],
    opening: list[ChatMessage],
    timeout_s: float,
) -> str | None:
    """One episode, the policy answering each turn the environment asks; None when it
    completed, else what failed (blamed in EVAL, by `control_episode`). A worker that timed
    out or died under it plays it once more first (`replays`)."""

    async def answer(turn: list[dict[str, Any]]) -> dict[str, Any]:
        said = _environment_messages(turn)
        if not ctx.llm.messages:
            await ctx.llm.start([*opening, *said])
        elif ctx.llm.num_turns >= ctx.limits.max_turns:
            ctx.set_finish_reason("max_turns")
            return {"end": "max_turns"}
        elif out_of_time(ctx, timeout_s):
            return {"end": "wall_time"}
        else:
            await ctx.llm.add_messages(said)
        sampled = await ctx.llm.generate()
        return {"reply": sampled.text}

    request = {"op": "episode", "taskset": taskset, "task": task}

    async def play(turns: Turns) -> str | None:
        return await _episode(python, request, timeout_s, turns)

    try:
        return await played_twice(ctx, play, RecordedTurns(answer), timeout_s)
    except VerifiersWorkerFailure as failure:
        return _worker_failed(failure)


async def control_episode(
    python: Path, taskset: dict[str, Any], task: dict[str, Any], timeout_s: float, max_turns: int
) -> ControlResult:
    """The same episode with an empty reply to every turn, ended at the same turn limit."""
    # Its turns are answered here, as the policy's are: see `empty_replies`.
    request = {"op": "episode", "taskset": taskset, "task": task}
    try:
        failure = await _episode(python, request, timeout_s, empty_replies(max_turns), True)
    except VerifiersWorkerFailure as exc:
        failure = _worker_failed(exc)
    except InfraError as exc:
        return ControlResult(False, f"with empty replies: {exc}", keep=False)
    if failure is None:
        return ControlResult(True, "the episode completes with empty replies")
    return ControlResult(False, f"with empty replies: {failure}", keep="timeout" not in failure)
