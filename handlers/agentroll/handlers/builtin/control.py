"""Who broke the grader: the policy's answer, or the grader itself? A control decides.

When a grader fails on the policy's answer (no reward file, an unparseable judgment, a
verifier that crashed or hung), the same grader is run once on a control: the task's reference
answer, or an empty one. If the control gets a verdict, the grader works and the policy's answer
is what broke it: reward 0 with a reason (an `infra_error` there would be resampled, and a policy
would learn that breaking its grader avoids a low score). If the control fails too, the grader is
broken for everyone: `infra_error`, naming the control's failure.

A control's result is kept in-process, per task content (`content_key` of the task's files or
instance and the grader's settings), for the life of the server, `MAX_ENTRIES` at most: a task's
control runs at most once per server, however many of its rollouts fail at once (they all wait
for the one run). A control that could not run at all (it was cancelled, its sandbox did not
start), or whose failure says nothing lasting (`ControlResult.keep`: the grader did not answer
in time), is not kept: the next failure tries again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentroll.handlers.context import Reward
from agentroll.handlers.errors import InfraError

MAX_ENTRIES = 4096
EMPTY_BY_TYPE: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
}
"""Each JSON-schema type's empty value: the control answer where nothing better is known."""


@dataclass(frozen=True, slots=True)
class ControlResult:
    """How the grader did on the control answer."""

    passed: bool
    """The grader gave a verdict (whatever its value): it works on this task."""
    detail: str
    """What it gave, or how it failed."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Anything else a grader learns from its control run (e.g. whether it left processes)."""
    keep: bool = True
    """False for a failure that says nothing lasting about the grader (it did not answer in
    time, could not be reached): it answers the rollouts waiting on this run, and the next
    failure runs the control again. Kept, a verifier busy for a moment (with the policy's own
    hanging answers, say) would make every later failure of the task `infra_error`."""

    def info(self) -> dict[str, Any]:
        return {"passed": self.passed, "detail": self.detail[-2000:], **self.facts}


class ControlCache:
    """Control results by task content, one run per key at a time, the oldest dropped first."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._done: OrderedDict[str, ControlResult] = OrderedDict()
        self._running: dict[str, asyncio.Future[ControlResult]] = {}
        self.runs = 0
        """Controls actually run (not answered from the cache): what tests count."""

    async def result(self, key: str, run: Callable[[], Awaitable[ControlResult]]) -> ControlResult:
        """The control's result for `key`: cached, or awaited from the run already going, or
        run now by `run()` (whose exceptions propagate and leave nothing cached)."""
        if key in self._done:
            self._done.move_to_end(key)
            return self._done[key]
        running = self._running.get(key)
        if running is not None:
            # Shielded: one waiter's cancellation must not cancel the others' run.
            return await asyncio.shield(running)
        future: asyncio.Future[ControlResult] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        self.runs += 1
        try:
            outcome = await run()
        except BaseException as exc:
            future.set_exception(InfraError(f"the control could not run: {exc!r}"[:2000]))
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            del self._running[key]
        future.set_result(outcome)
        if not outcome.keep:
            return outcome
        self._done[key] = outcome
        while len(self._done) > self.max_entries:
            self._done.popitem(last=False)
        return outcome

    def clear(self) -> None:
        self._done.clear()


CONTROLS = ControlCache()
"""The server's one cache (handlers run in the server's process)."""


def content_key(kind: str, *parts: Any) -> str:
    """A key naming the task's content and the grader's settings (JSON-able parts)."""
    text = json.dumps([kind, *parts], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def blamed(
    failure: InfraError, reason: str, control: ControlResult, info: dict[str, Any]
) -> Reward:
    """The verdict once the control ran: reward 0 with `reason` when the grader works on the
    control (the policy's answer broke it); `failure` again, the control's failure added,
    when the grader fails on both (its `cause` kept)."""
    if not control.passed:
        raise InfraError(
            f"{failure}\nThe grader fails on the control answer too, so it is broken for "
            f"everyone: {control.detail[-1500:]}",
            cause=failure.cause,
        ) from failure
    blame = {"reason": reason, "failure": str(failure)[-2000:], "failure_cause": failure.cause}
    return Reward(0.0, {**info, **blame, "control": control.info()})


def empty_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """The empty answer to a JSON object `schema` (a tool's arguments, an action): each
    required argument its type's empty value (a number its `minimum`, where the schema sets
    one)."""
    properties = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = properties.get(name) if isinstance(properties, dict) else None
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        value = EMPTY_BY_TYPE.get(kind) if isinstance(kind, str) else None
        if kind in ("integer", "number") and isinstance(prop.get("minimum"), int | float):
            value = prop["minimum"]
        out[name] = value
    return out
