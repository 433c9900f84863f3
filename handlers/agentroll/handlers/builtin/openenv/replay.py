"""Whose fault a failed `step` is: a control by replay.

A `step` the environment gave no answer to (`StepFailed`: its step raised, `EXECUTION_ERROR`;
no answer within the step's bound; the WebSocket dropped) may be the policy's doing: an action
the environment chokes on. An episode is stateful, so its control replays it. Twice, each time
in a fresh session on the same server: `reset` with the same data and the episode's earlier
answered steps sent again in order, then
1. the failing action again: it must fail again (a failure that does not recur was the
   environment's moment, not the action's);
2. a control action in its place (the action schema's empty answer; under a harness, the same
   MCP tool with empty arguments): it must be answered with an observation.

- Both hold, and every replayed answer (reset's too) equals the recorded one: the environment
  works in that state and fails on that action, so the action broke it. The rollout ends
  `agent_error` `action_failed_environment`, scored with the rewards so far; the failure and
  the control are in `reward_info`.
- A replayed answer differs (an environment that is not deterministic): the control cannot say
  which state it tests, so the failure stays `infra_error`, the difference named.
- The failure does not recur, or the control fails too (its step raises or hangs, the server
  is unreachable, as after an action that killed the server's process): `infra_error` with the
  failure's cause, naming both.

Each replay's time is bounded as a whole (`control_budget_s`); its session is closed on every
path. A control that equals the failing action proves nothing and is not sent.
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

ControlAction = Callable[[Session], Awaitable[dict[str, Any]]]
"""The control's action, made in the control's own session (after the replay)."""


def empty_action(schema: dict[str, Any]) -> ControlAction:
    """The tool loop's control: the action schema's empty answer."""

    async def action(session: Session) -> dict[str, Any]:
        return empty_arguments(schema)

    return action


def empty_tool_call(tool_name: str) -> ControlAction:
    """A harness's control: the same MCP tool with the empty answer to its input schema (read
    from the control session's `tools/list`)."""

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


def control_budget_s(timeout_s: float, steps: int) -> float:
    """One replay's bound: each frame's own, summed (connecting and `reset`, the replayed
    steps, listing the tools and the last step; a step's is `timeout_s` plus the
    environment's own)."""
    return 3 * timeout_s + (steps + 1) * (timeout_s + ENVIRONMENT_TOOL_BOUND_S)


@dataclass(frozen=True)
class Attempt:
    """One replay and the step that followed it: its action, and its answer or failure (a
    `detail` saying why not, with `differs` when the replay itself did not reproduce)."""

    action: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    detail: str = ""
    differs: bool = False
    step_failed: bool = False
    """The step got no answer (`StepFailed`), as the episode's failing one did."""


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
                    return Attempt(detail=f"the replay differs: {difference}", differs=True)
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


async def replayed_control(
    failure: StepFailed,
    url: str,
    timeout_s: float,
    recorded: Sequence[Exchange],
    control: ControlAction,
) -> ControlResult:
    """Passed when the failing action fails again after a replay of the episode, and the
    `control` action in its place is answered after another (each replay reproducing every
    recorded answer)."""

    async def failing(session: Session) -> dict[str, Any]:
        return failure.action

    async def in_its_place(session: Session) -> dict[str, Any]:
        action = await control(session)
        if action == failure.action:
            raise InfraError(f"the control {json.dumps(action)} is the failing action itself")
        return action

    again = await attempt(url, timeout_s, recorded, failing)
    if again.differs:
        return ControlResult(False, f"inconclusive, {again.detail}")
    if again.action is None:  # the replay broke before the action was sent
        return ControlResult(False, f"the replay failed: {again.detail}")
    if not again.step_failed:
        answered = again.detail or f"answered {json.dumps(again.answer)[:1000]}"
        return ControlResult(False, f"the failure did not recur on a replay: {answered}")
    checked = await attempt(url, timeout_s, recorded, in_its_place)
    if checked.differs:
        return ControlResult(False, f"inconclusive, {checked.detail}")
    if checked.answer is None or checked.answer["type"] != "observation":
        refused = checked.detail or json.dumps(checked.answer)
        return ControlResult(False, f"the control failed: {refused}"[:2000])
    action, answer = json.dumps(checked.action), json.dumps(checked.answer["data"])
    facts = {"failure_recurred": again.detail[:1000]}
    return ControlResult(True, f"the control {action} was answered: {answer}"[:2000], facts)


async def replayed(session: Session, recorded: Sequence[Exchange]) -> str | None:
    """The first difference between the replay's answers and the recorded ones, if any."""
    for index, exchange in enumerate(recorded):
        if index > 0:
            await session.ask("step", exchange.data)
        again = session.exchanges[index] if index < len(session.exchanges) else None
        if again is None or again.answer != exchange.answer:
            got = "an error" if again is None else json.dumps(again.answer)
            return (
                f"{exchange.kind} {index} was answered {json.dumps(exchange.answer)[:500]}, "
                f"now {got[:500]}"
            )
    return None


async def judged(
    failure: StepFailed, session: Session, control: ControlAction, episode: Episode
) -> AgentError | InfraError:
    """What a failed step of `session` (closed) is, once its replayed control ran: the
    policy's `AgentError` (the verdict kept in `episode.blame`), or the failure itself, its
    control's failure named."""
    result = await replayed_control(
        failure, session.url, session.timeout_s, session.exchanges, control
    )
    try:
        verdict = blamed(failure, REASON, result, {})
    except InfraError as broken:
        return broken
    episode.blame = verdict.info
    return AgentError(
        f"the environment fails on the policy's action (again on a replay of the episode) and "
        f"answers a control in its place: {failure}"[:2000],
        cause=REASON,
    )


@contextlib.asynccontextmanager
async def blamed_tools(
    url: str, timeout_s: float, reset: dict[str, Any], episode: Episode, limits: tuple[int, int]
) -> AsyncIterator[OpenEnvTools]:
    """`served_tools`, with a failed step judged by its replayed control when the harness's
    run is over."""
    tools: OpenEnvTools | None = None
    try:
        async with served_tools(url, timeout_s, reset, episode, limits) as tools:
            yield tools
    except StepFailed as failure:
        if tools is None:
            raise
        control = empty_tool_call(str(failure.action.get("tool_name")))
        raise await judged(failure, tools.session, control, episode) from failure
