"""Whose fault a failed `step` is: a control by replay.

A `step` the environment gave no answer to (`StepFailed`: its step raised, `EXECUTION_ERROR`;
no answer within the step's bound; the WebSocket dropped) may be the policy's doing: an action
the environment chokes on. An episode is stateful, so its control replays it. Twice, each time
in a fresh session on the same server: `reset` with the same data and the episode's earlier
answered steps sent again in order, then
1. the failing action again: it must fail again (a failure that does not recur was the
   environment's moment, not the action's);
2. a control action in its place: it must be answered with an observation. The control is the
   episode's last action answered without an error (under a harness, the last such call of
   the same tool): it went down the environment's real path, so an outage of what lies
   behind the environment fails it too. Only where the episode has none, the action schema's
   empty answer (under a harness, the same MCP tool with empty arguments), which an
   environment may answer without reaching its backend.

- Both hold, and every replayed answer (reset's too) equals the recorded one: the environment
  works in that state and fails on that action, so the action broke it. The rollout ends
  `agent_error` `action_failed_environment`, scored with the rewards so far; the failure and
  the control are in `reward_info`.
- The control fails after the replayed episode but is answered when sent right after `reset`
  (a third, short replay): the policy's own earlier actions broke the session (e.g. a tool
  that poisons the environment's process state), so the same `agent_error`.
- A replayed answer differs, or the failure does not recur: the environment is not
  replayable (an earlier action printed the time; the failing action depends on state shared
  across sessions). `infra_error` `openenv_unreplayable`, unless the server is declared
  `deterministic` by the operator: then a difference after an identical `reset`, or a failure
  that does not recur, can only be the policy's making, and is blamed on it.
- The control fails too (its step raises or hangs, the server is unreachable): `infra_error`
  with the failure's cause, naming both.

Bounds: each replay as a whole (`control_budget_s`), and all of them together, waiting for
their turn included, by what is left of RUN's budget: a verdict not reached in it is
`infra_error` `openenv_control_timeout` (never RUN's stage timeout). At most one replay runs
at a time per server URL, so an action that kills or hangs a shared server's worker is not
sent to it by many rollouts at once; a WebSocket that dropped is replayed only when the
server still answers HTTP. Every session is closed on every path. A control that equals the
failing action proves nothing and is not sent.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from agentroll.handlers.builtin.control import ControlResult, blamed, empty_arguments
from agentroll.handlers.builtin.openenv.mcp_tools import OpenEnvTools, mcp_tool, served_tools
from agentroll.handlers.builtin.openenv.session import (
    ENVIRONMENT_TOOL_BOUND_S,
    Episode,
    Exchange,
    Session,
    open_session,
)
from agentroll.handlers.errors import AgentError, InfraError, StepFailed

REASON = "action_failed_environment"
UNREPLAYABLE = "openenv_unreplayable"
OUT_OF_TIME = "openenv_control_timeout"

ControlAction = Callable[[Session], Awaitable[dict[str, Any]]]
"""The control's action, made in the control's own session (after the replay)."""


def empty_action(schema: dict[str, Any]) -> ControlAction:
    """The tool loop's control where the episode has none better: the action schema's empty
    answer."""

    async def action(session: Session) -> dict[str, Any]:
        return empty_arguments(schema)

    return action


def empty_tool_call(tool_name: str) -> ControlAction:
    """A harness's control where the episode has none better: the same MCP tool with the
    empty answer to its input schema (read from the control session's `tools/list`)."""

    async def action(session: Session) -> dict[str, Any]:
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        answer = await session.ask("mcp", listing, answers=("mcp",))
        try:
            tools = [mcp_tool(t) for t in answer["data"]["result"]["tools"] if isinstance(t, dict)]
        except (KeyError, TypeError) as exc:
            raise InfraError(f"tools/list: {exc!r}", cause="openenv_error") from exc
        schemas = [t["inputSchema"] for t in tools if t["name"] == tool_name]
        arguments = empty_arguments(schemas[0] if schemas else {})
        return {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}

    return action


def answered_action(recorded: Sequence[Exchange], failing: dict[str, Any]) -> dict[str, Any] | None:
    """The episode's last step answered without an error that is not the failing action
    (with the same `tool_name` as it: under a harness, a call of the same tool)."""
    for exchange in reversed(recorded[1:]):
        answer = exchange.answer if isinstance(exchange.answer, dict) else {}
        observation = answer.get("observation")
        error = observation.get("error") if isinstance(observation, dict) else None
        same_tool = exchange.data.get("tool_name") == failing.get("tool_name")
        if exchange.kind == "step" and exchange.data != failing and same_tool and not error:
            return exchange.data
    return None


def episode_control(
    recorded: Sequence[Exchange], failing: dict[str, Any], fallback: ControlAction
) -> ControlAction:
    """The control for `failing`: the episode's last answered action (`answered_action`),
    else `fallback` (the empty one)."""
    action = answered_action(recorded, failing)
    if action is None:
        return fallback

    async def again(session: Session) -> dict[str, Any]:
        return action

    return again


def control_budget_s(timeout_s: float, steps: int) -> float:
    """One replay's bound: each frame's own, summed (connecting and `reset`, the replayed
    steps, listing the tools and the last step; a step's is `timeout_s` plus the
    environment's own)."""
    return 3 * timeout_s + (steps + 1) * (timeout_s + ENVIRONMENT_TOOL_BOUND_S)


@dataclass(frozen=True)
class Attempt:
    """One replay and the step that followed it: its action, and its answer or failure (a
    `detail` saying why not, with `differs_at` when the replay itself did not reproduce)."""

    action: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    detail: str = ""
    differs_at: int | None = None
    """The index of the first exchange answered differently (0: the `reset`)."""
    step_failed: bool = False
    """The step got no answer (`StepFailed`), as the episode's failing one did."""

    @property
    def observed(self) -> bool:
        return self.answer is not None and self.answer.get("type") == "observation"


async def attempt(
    url: str, timeout_s: float, recorded: Sequence[Exchange], action_for: ControlAction
) -> Attempt:
    """The episode's `recorded` exchanges (its `reset` first) replayed in a fresh session on
    `url`, then one more step, `action_for(session)`; the session is closed on every path."""
    reset, steps = recorded[0], recorded[1:]
    budget_s = control_budget_s(timeout_s, len(steps))
    session: Session | None = None
    action: dict[str, Any] | None = None
    async with aiohttp.ClientSession(trust_env=False) as http:
        try:
            async with asyncio.timeout(budget_s):
                session = await open_session(http, url, timeout_s, reset.data, Episode())
                difference = await replayed(session, recorded)
                if difference is not None:
                    index, detail = difference
                    return Attempt(detail=f"the replay differs: {detail}", differs_at=index)
                action = await action_for(session)
                answer = await session.ask("step", action)
        except TimeoutError:
            return Attempt(action, detail=f"the replay took over its {budget_s:g} s")
        except (InfraError, AgentError) as exc:  # an answer too big is no control's answer
            failed = isinstance(exc, StepFailed) and exc.action is action
            return Attempt(action, detail=f"{exc.cause}: {exc}", step_failed=failed)
        finally:
            if session is not None:
                await session.close()
    return Attempt(action, answer)


Verdict = tuple[ControlResult, str]
"""The control's result, and the cause a failed one gives the failure ("": its own)."""


def not_replayable(again: Attempt, deterministic: bool) -> Verdict:
    """A replay that answered differently: the policy's making on a server declared
    deterministic (after an identical `reset`), else nobody can tell."""
    if deterministic and again.differs_at:
        detail = f"the deterministic environment answered the replay differently: {again.detail}"
        return ControlResult(True, detail[:2000]), ""
    return ControlResult(False, f"inconclusive, {again.detail}"), UNREPLAYABLE


async def replayed_control(
    failure: StepFailed,
    url: str,
    timeout_s: float,
    recorded: Sequence[Exchange],
    control: ControlAction,
    deterministic: bool = False,
) -> Verdict:
    """Passed when the failing action fails again after a replay of the episode, and the
    `control` action in its place is answered after another (each replay reproducing every
    recorded answer), or, failing that, right after `reset`."""

    async def failing(session: Session) -> dict[str, Any]:
        return failure.action

    async def in_its_place(session: Session) -> dict[str, Any]:
        action = await control(session)
        if action == failure.action:
            raise InfraError(f"the control {json.dumps(action)} is the failing action itself")
        return action

    again = await attempt(url, timeout_s, recorded, failing)
    if again.differs_at is not None:
        return not_replayable(again, deterministic)
    if again.action is None:  # the replay broke before the action was sent
        return ControlResult(False, f"the replay failed: {again.detail}"), ""
    if not again.step_failed:
        answered = again.detail or f"answered {json.dumps(again.answer)[:1000]}"
        if again.answer is None:  # another failure (an error frame, out of its time)
            return ControlResult(False, f"the failure did not recur on a replay: {answered}"), ""
        if deterministic:
            detail = "the failure did not recur on a replay of a deterministic environment: "
            return ControlResult(True, f"{detail}{answered}"[:2000]), ""
        return ControlResult(False, f"the failure did not recur on a replay: {answered}"), (
            UNREPLAYABLE
        )
    checked = await attempt(url, timeout_s, recorded, in_its_place)
    if checked.differs_at is not None:
        return not_replayable(checked, deterministic)
    facts = {"failure_recurred": again.detail[:1000]}
    if not checked.observed and checked.step_failed and len(recorded) > 1:
        # Perhaps the policy's earlier actions broke the session: the same control, fresh.
        fresh = await attempt(url, timeout_s, recorded[:1], in_its_place)
        if fresh.observed:
            action, answer = json.dumps(fresh.action), json.dumps(fresh.answer)
            detail = (
                f"the control {action} failed after the replayed episode ({checked.detail}) "
                f"and was answered right after reset, so the episode's own actions broke the "
                f"session: {answer}"
            )
            return ControlResult(True, detail[:2000], {**facts, "control_after_reset": True}), ""
    if not checked.observed:
        refused = checked.detail or json.dumps(checked.answer)
        return ControlResult(False, f"the control failed: {refused}"[:2000]), ""
    assert checked.answer is not None
    action, answer = json.dumps(checked.action), json.dumps(checked.answer["data"])
    return ControlResult(True, f"the control {action} was answered: {answer}"[:2000], facts), ""


async def replayed(session: Session, recorded: Sequence[Exchange]) -> tuple[int, str] | None:
    """The first difference between the replay's answers and the recorded ones, if any: its
    index and what it is."""
    for index, exchange in enumerate(recorded):
        if index > 0:
            await session.ask("step", exchange.data)
        again = session.exchanges[index] if index < len(session.exchanges) else None
        if again is None or again.answer != exchange.answer:
            got = "an error" if again is None else json.dumps(again.answer)
            return index, (
                f"{exchange.kind} {index} was answered {json.dumps(exchange.answer)[:500]}, "
                f"now {got[:500]}"
            )
    return None


class OneAtATime:
    """At most one holder per key at a time. A key's lock lives only while it is held or
    awaited, so none outlives the event loop it was made in."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


REPLAYS = OneAtATime()
"""Replays by server URL (handlers run in the server's process)."""


async def unreachable(url: str, timeout_s: float) -> str | None:
    """Why the server at `url` gives no answer to `GET /schema` within `timeout_s` (a 5xx
    from a gateway in front of it counts as none); None if it answers."""
    try:
        async with (
            aiohttp.ClientSession(trust_env=False) as http,
            asyncio.timeout(timeout_s),
            http.get(f"{url}/schema") as response,
        ):
            status = response.status
    except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
        return repr(exc)
    return f"GET /schema answered {status}" if status >= 500 else None


async def verdict_within(
    failure: StepFailed, session: Session, control: ControlAction, deterministic: bool
) -> Verdict:
    """The replayed control, in its server's turn; a dropped WebSocket is replayed only
    while the server still answers (a killed server is not killed again)."""
    async with REPLAYS.turn(session.url):
        if failure.cause == "openenv_connection_lost":
            gone = await unreachable(session.url, session.timeout_s)
            if gone is not None:
                return ControlResult(False, f"the server is unreachable, not replayed: {gone}"), ""
        return await replayed_control(
            failure, session.url, session.timeout_s, session.exchanges, control, deterministic
        )


async def judged(
    failure: StepFailed,
    session: Session,
    control: ControlAction,
    episode: Episode,
    budget_s: float,
    deterministic: bool = False,
) -> AgentError | InfraError:
    """What a failed step of `session` (closed) is, once its replayed control ran within
    `budget_s` (what is left of RUN's): the policy's `AgentError` (the verdict kept in
    `episode.blame`), or the failure itself, its control's failure named. `control` is the
    empty action; the episode's last answered one replaces it where there is one."""
    control = episode_control(session.exchanges, failure.action, control)
    # The last replay's session is closed within `timeout_s` after the bound ends.
    room_s = budget_s - session.timeout_s
    try:
        if room_s <= 0:
            raise TimeoutError
        async with asyncio.timeout(room_s):
            result, cause = await verdict_within(failure, session, control, deterministic)
    except TimeoutError:
        return InfraError(
            f"{failure}\nNo verdict on whose doing it is within RUN's budget "
            f"({max(0.0, budget_s):.0f} s were left for replaying the episode)"[:2000],
            cause=OUT_OF_TIME,
        )
    try:
        verdict = blamed(failure, REASON, result, {})
    except InfraError as broken:
        return InfraError(str(broken), cause=cause) if cause else broken
    episode.blame = verdict.info
    return AgentError(
        f"the environment fails on the policy's doing ({result.detail[:500]}): {failure}"[:2000],
        cause=REASON,
    )


@contextlib.asynccontextmanager
async def blamed_tools(
    url: str,
    timeout_s: float,
    reset: dict[str, Any],
    episode: Episode,
    limits: tuple[int, int],
    budget_s: Callable[[], float],
    deterministic: bool = False,
) -> AsyncIterator[OpenEnvTools]:
    """`served_tools`, with a failed step judged by its replayed control when the harness's
    run is over, within `budget_s()` (what is left of RUN's then)."""
    tools: OpenEnvTools | None = None
    try:
        async with served_tools(url, timeout_s, reset, episode, limits) as tools:
            yield tools
    except StepFailed as failure:
        if tools is None:
            raise
        control = empty_tool_call(str(failure.action.get("tool_name")))
        verdict = await judged(failure, tools.session, control, episode, budget_s(), deterministic)
        raise verdict from failure
