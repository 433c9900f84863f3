"""A failed OpenEnv `step` blamed by a replayed control (`openenv.replay.judged`), against a
scripted session endpoint: the doors openenv-core's own server does not open cheaply (a
WebSocket dropped by a live server, an environment that answers differently each time)."""

import asyncio
import contextlib
import itertools
import time
from typing import Any

import aiohttp
import pytest

from agentroll.handlers.builtin.openenv import replay as replay_module
from agentroll.handlers.builtin.openenv import session as session_module
from agentroll.handlers.builtin.openenv.handler import StepTool
from agentroll.handlers.builtin.openenv.replay import (
    answered_action,
    blamed_tools,
    empty_action,
    judged,
)
from agentroll.handlers.builtin.openenv.session import Episode, Exchange, Session, open_session
from agentroll.handlers.errors import AgentError, InfraError, StepFailed
from agentroll.testing.openenv import StepScript, scripted_env

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
SCHEMA["required"] = ["n"]
BUDGET_S = 600.0
"""What is left of RUN's budget when a failure is judged: ample, unless a test says so."""
BOOM = {"type": "error", "data": {"code": "EXECUTION_ERROR", "message": "boom"}}


def answer(observation: dict[str, Any]) -> dict[str, Any]:
    return {"type": "observation", "data": {"observation": observation, "reward": -0.1}}


async def failed_episode(url: str, guesses: list[int]) -> tuple[Session, StepFailed, Episode]:
    """An episode of `guesses`, the last of which fails; its session closed."""
    episode = Episode()
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url, 5, {"seed": 3}, episode)
        try:
            for n in guesses:
                episode.add((await session.ask("step", {"n": n}))["data"])
        except StepFailed as exc:
            failure = exc
        finally:
            await session.close()
    return session, failure, episode


def recording(steps: list[int], respond: StepScript) -> StepScript:
    async def script(frame: dict[str, Any]) -> dict[str, Any]:
        steps.append(frame["data"]["n"])
        return await respond(frame)

    return script


async def test_an_action_a_deterministic_environment_fails_on_is_the_policys() -> None:
    steps: list[int] = []

    async def chokes_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        return BOOM if n == 7 else answer({"echo": n})

    async with scripted_env(recording(steps, chokes_on_7)) as url:
        session, failure, episode = await failed_episode(url, [3, 4, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    # Replayed twice: the failing guess again (it fails again), then the episode's last
    # answered guess in its place (answered).
    assert steps == [3, 4, 7, 3, 4, 7, 3, 4, 4]
    assert episode.blame is not None and episode.blame["control"]["passed"] is True
    assert episode.blame["failure_cause"] == "openenv_error" and "boom" in episode.blame["failure"]
    assert episode.reward == pytest.approx(-0.2)


async def test_a_failure_that_does_not_recur_on_replay_stays_infra() -> None:
    """The environment failed for a moment (a restart, a hiccup): the same action after the
    same replay is answered, so the action is not to blame."""
    steps: list[int] = []

    async def hiccup(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        return BOOM if n == 7 and steps.count(7) == 1 else answer({"echo": n})

    async with scripted_env(recording(steps, hiccup)) as url:
        session, failure, episode = await failed_episode(url, [3, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    # Its own cause, so trainers can count environments that cannot be replayed.
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_unreplayable"
    assert "the failure did not recur on a replay" in str(verdict)
    assert steps == [3, 7, 3, 7]  # no control needed
    assert episode.blame is None


async def test_an_environment_that_answers_differently_on_replay_stays_infra() -> None:
    """Its answers change from one session to the next: the control cannot test the state the
    action failed in, so the failure is not blamed on the policy."""
    steps: list[int] = []
    clock = itertools.count()

    async def noisy(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        return BOOM if n == 7 else answer({"echo": n, "tick": next(clock)})

    async with scripted_env(recording(steps, noisy)) as url:
        session, failure, episode = await failed_episode(url, [3, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, InfraError) and not isinstance(verdict, StepFailed)
    assert verdict.cause == "openenv_unreplayable"
    assert "inconclusive, the replay differs: step 1" in str(verdict)
    assert steps == [3, 7, 3]  # no control sent after a differing replay
    assert episode.blame is None


async def test_a_websocket_a_live_server_drops_on_one_action_is_the_policys() -> None:
    """Another door: not an error frame but the connection cut mid-step; the server lives on
    and answers the control, so the action did it."""

    async def drops_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        if n == 7:
            raise ConnectionResetError("the step took the session down")
        return answer({"echo": n})

    async with scripted_env(drops_on_7) as url:
        session, failure, episode = await failed_episode(url, [2, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert failure.cause == "openenv_connection_lost"
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert episode.blame is not None and episode.blame["failure_cause"] == "openenv_connection_lost"


async def test_an_environment_that_fails_on_the_control_too_is_infra_naming_both() -> None:
    """Every step fails: no answered action to control with, so the empty one, which fails
    too."""

    async def broken(frame: dict[str, Any]) -> dict[str, Any]:
        return BOOM

    async with scripted_env(broken) as url:
        session, failure, episode = await failed_episode(url, [7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_error"
    message = str(verdict)
    assert message.startswith("step failed:") and "fails on the control answer too" in message
    assert "openenv_error: step failed" in message.split("control answer too")[1]
    assert episode.blame is None


async def test_an_action_the_environment_hangs_on_is_the_policys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another door: no answer within the step's bound, on one action alone (the bound is
    `timeout_s` plus the environment's own 30 s, shortened here to keep the test short)."""
    for module in (session_module, replay_module):
        monkeypatch.setattr(module, "ENVIRONMENT_TOOL_BOUND_S", 0.0)
    steps: list[int] = []

    async def hangs_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        if n == 7:
            await asyncio.sleep(2)
        return answer({"echo": n})

    async with scripted_env(recording(steps, hangs_on_7)) as url:
        episode = Episode()
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url, 0.5, {}, episode)
            episode.add((await session.ask("step", {"n": 4}))["data"])
            with pytest.raises(StepFailed) as raised:
                await session.ask("step", {"n": 7})
            await session.close()
        verdict = await judged(raised.value, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert raised.value.cause == "openenv_timeout"
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert steps == [4, 7, 4, 7, 4, 4]
    assert episode.blame is not None
    assert "no answer to step" in episode.blame["control"]["failure_recurred"]


async def nap(seconds: float, woken: asyncio.Event) -> None:
    """`seconds`, or until `woken` (so the test's server is not left waiting at its end)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(woken.wait(), seconds)


def slow_replays(steps: list[int], nap_s: float, woken: asyncio.Event) -> StepScript:
    """Chokes on 7; a guess of 3 sent again (by a replay) takes `nap_s` (or until woken)."""

    async def script(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        if n == 3 and steps.count(3) > 1:
            await nap(nap_s, woken)
        return BOOM if n == 7 else answer({"echo": n})

    return recording(steps, script)


async def test_a_verdict_not_reached_within_runs_budget_is_infra_never_a_stage_timeout() -> None:
    """The replays would run past what is left of RUN's budget (each alone within its own
    bound): they are cut at the budget, `infra_error` `openenv_control_timeout`, so RUN's
    stage timeout never ends the rollout `timed_out`."""
    steps: list[int] = []
    woken = asyncio.Event()
    async with scripted_env(slow_replays(steps, 60, woken)) as url:
        session, failure, episode = await failed_episode(url, [3, 4, 7])
        began = time.monotonic()
        # 1 s to replay in, after the `timeout_s` (5 s) kept to close the last session.
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, 6.0)
        took_s = time.monotonic() - began
        woken.set()
    assert isinstance(verdict, InfraError) and not isinstance(verdict, StepFailed)
    assert verdict.cause == "openenv_control_timeout"
    assert "No verdict on whose doing it is within RUN's budget" in str(verdict)
    assert "boom" in str(verdict)  # the failure itself is named
    assert took_s < 30  # not the 60 s nap: cut at the budget
    assert steps == [3, 4, 7, 3] and episode.blame is None


async def test_replays_within_the_budget_still_blame_the_action() -> None:
    """The honest control beside it: the same slow replays with the budget to finish them."""
    steps: list[int] = []
    async with scripted_env(slow_replays(steps, 0.5, asyncio.Event())) as url:
        session, failure, episode = await failed_episode(url, [3, 4, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert steps == [3, 4, 7, 3, 4, 7, 3, 4, 4]


async def test_no_budget_left_sends_no_replay() -> None:
    """Another door: RUN's budget was spent by the loop (or the harness): nothing is sent."""
    steps: list[int] = []
    async with scripted_env(slow_replays(steps, 0, asyncio.Event())) as url:
        session, failure, episode = await failed_episode(url, [3, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, 0.0)
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_control_timeout"
    assert steps == [3, 7]


async def test_a_step_cut_short_by_the_loops_budget_is_the_policys_wall_time() -> None:
    """The loop has less time left than the step's own bound (`timeout_s` + 30 s): the step
    waits only that long, and running out is the policy's budget (`wall_time`), not an
    environment failure to replay. Beside it, a step answered in time."""

    woken = asyncio.Event()

    async def hangs_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        if n == 7:
            await nap(60, woken)
        return answer({"echo": n})

    async with scripted_env(hangs_on_7) as url:
        episode = Episode()
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url, 5, {}, episode)
            tool = StepTool(session, episode, SCHEMA, tool_timeout_s=60)
            answered = await tool.call(None, {"n": 3}, limit_s=60, max_chars=10_000)
            began = time.monotonic()
            with pytest.raises(AgentError) as raised:
                await tool.call(None, {"n": 7}, limit_s=0.5, max_chars=10_000)
            took_s = time.monotonic() - began
            await session.close()
        woken.set()
    assert '"echo": 3' in answered
    assert not isinstance(raised.value, InfraError)
    assert raised.value.cause == "wall_time" and raised.value.finish_reason == "wall_time"
    assert "time budget" in str(raised.value)
    assert took_s < 30  # not the step's own 35 s bound
    assert session.ws.closed


def outage_behind(steps: list[int]) -> tuple[StepScript, Any]:
    """An environment whose answers come from a backend, memoised per episode history: an
    answer computed once is served again without the backend; guess 1 is answered without it
    too (a short cut). The backend goes down for good when guess 7 first reaches it."""
    history: list[int] = []
    memo: set[tuple[int, ...]] = set()
    backend = {"up": True}

    async def script(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        history.append(n)
        key = tuple(history)
        if n == 7:
            backend["up"] = False
        if n == 1 or key in memo:
            return answer({"echo": n})
        if not backend["up"]:
            return BOOM
        memo.add(key)
        return answer({"echo": n})

    return recording(steps, script), history.clear


async def test_an_outage_the_empty_action_would_not_reach_is_infra() -> None:
    """The backend went down at the failing step. The replay reproduces the failure (the
    outage persists) and the schema's empty action takes a short cut that is answered: as a
    control it would blame the outage on the policy. The episode's last answered action
    goes down the real path and fails too, also right after reset: infra_error."""
    steps: list[int] = []
    script, on_reset = outage_behind(steps)
    async with scripted_env(script, on_reset) as url:
        session, failure, episode = await failed_episode(url, [3, 4, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_error"
    assert "fails on the control answer too" in str(verdict)
    # the failing guess again; guess 4 in its place; guess 4 right after reset
    assert steps == [3, 4, 7, 3, 4, 7, 3, 4, 4, 4]
    assert episode.blame is None


def test_the_control_is_the_last_call_of_the_same_tool_answered_without_an_error() -> None:
    """Under a harness: a call of another tool, or one whose observation is an error, would
    not test the failing tool's real path."""

    def call(tool: str, n: int, error: bool = False) -> Exchange:
        observation = {"error": {"error_type": "execution_error"}} if error else {"result": n}
        action = {"type": "call_tool", "tool_name": tool, "arguments": {"n": n}}
        return Exchange("step", action, {"observation": observation})

    reset = Exchange("reset", {}, {"observation": {}})
    failing = call("guess", 9).data
    recorded = [reset, call("guess", 2), call("hint", 3), call("guess", 4, error=True)]
    assert answered_action(recorded, failing) == call("guess", 2).data
    assert answered_action([reset, call("hint", 3)], failing) is None
    assert answered_action([reset, call("guess", 9)], failing) is None  # the failing one


async def test_a_session_the_policy_poisoned_earlier_is_the_policys() -> None:
    """Guess 5 poisons the session (every later step fails, as after a tool that set
    `builtins.print = None`); the policy then fails on 7. After the replayed episode the
    control fails too, but sent right after reset it is answered: the policy's own earlier
    action broke the session, agent_error."""
    steps: list[int] = []
    history: list[int] = []

    async def poisoned_by_5(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        poisoned = 5 in history
        history.append(n)
        return BOOM if poisoned else answer({"echo": n})

    async with scripted_env(recording(steps, poisoned_by_5), history.clear) as url:
        session, failure, episode = await failed_episode(url, [3, 5, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert steps == [3, 5, 7, 3, 5, 7, 3, 5, 5, 5]
    assert episode.blame is not None
    control = episode.blame["control"]
    assert control["passed"] is True and control["control_after_reset"] is True
    assert "answered right after reset" in control["detail"]


async def test_replays_on_one_server_run_one_at_a_time() -> None:
    """Two episodes fail on the same server at once: their replays do not overlap (an action
    that kills or hangs a shared server is not sent to it by many rollouts at once)."""
    steps: list[int] = []

    async def slow(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        await asyncio.sleep(0.05)
        return BOOM if n in (7, 8) else answer({"echo": n})

    async with scripted_env(recording(steps, slow)) as url:
        (s1, f1, e1), (s2, f2, e2) = await asyncio.gather(
            failed_episode(url, [3, 7]), failed_episode(url, [4, 8])
        )
        del steps[:]
        verdicts = await asyncio.gather(
            judged(f1, s1, empty_action(SCHEMA), e1, BUDGET_S),
            judged(f2, s2, empty_action(SCHEMA), e2, BUDGET_S),
        )
    assert all(isinstance(v, AgentError) for v in verdicts)
    first, second = [3, 7, 3, 3], [4, 8, 4, 4]
    assert steps in (first + second, second + first)
    assert replay_module.REPLAYS._locks == {}  # nothing kept once done


async def test_a_dropped_websocket_of_a_server_that_is_gone_is_not_replayed() -> None:
    """The action took the server down (the WebSocket dropped and nothing answers HTTP any
    more): replaying it could only take it down again, and the verdict would be infra
    anyway; so no replay, infra_error with the failure's cause. (With the server still up,
    the test above blames the action.)"""

    async def drops_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        if frame["data"]["n"] == 7:
            raise ConnectionResetError("the step took the server down")
        return answer({"echo": frame["data"]["n"]})

    async with scripted_env(drops_on_7) as url:
        session, failure, episode = await failed_episode(url, [2, 7])
    verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S)
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_connection_lost"
    assert "the server is unreachable, not replayed" in str(verdict)
    assert episode.blame is None


@pytest.mark.parametrize("door", ["answers-differently", "does-not-recur"])
async def test_on_a_server_declared_deterministic_an_unreplayable_failure_is_the_policys(
    door: str,
) -> None:
    """The policy printed the time in an earlier step (every replay differs), or made the
    failing action depend on state shared across sessions (a marker file it creates: the
    failure does not recur). On a server the operator declared deterministic only the
    policy can have done either: agent_error. Undeclared, the same is infra_error
    `openenv_unreplayable` (the tests above)."""
    steps: list[int] = []
    clock = itertools.count()

    async def script(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        if door == "answers-differently":
            return BOOM if n == 7 else answer({"echo": n, "tick": next(clock)})
        return BOOM if n == 7 and steps.count(7) == 1 else answer({"echo": n})

    async with scripted_env(recording(steps, script)) as url:
        session, failure, episode = await failed_episode(url, [3, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode, BUDGET_S, True)
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert episode.blame is not None and "deterministic" in episode.blame["control"]["detail"]


@pytest.mark.parametrize("budget_s", [0.0, BUDGET_S])
async def test_under_a_harness_the_replays_get_what_its_run_left_of_the_budget(
    budget_s: float,
) -> None:
    """The harness ran out RUN's budget before its failed call is judged: no replay, infra
    `openenv_control_timeout`. Beside it, with time left, the call is blamed on the policy
    (the last answered call of the same tool as the control)."""
    calls: list[dict[str, Any]] = []

    async def chokes_on_7(frame: dict[str, Any]) -> dict[str, Any]:
        calls.append(frame["data"])
        n = frame["data"]["arguments"]["n"]
        return BOOM if n == 7 else answer({"result": n})

    async with scripted_env(chokes_on_7) as url:
        episode = Episode()
        with pytest.raises((AgentError, InfraError)) as raised:
            async with blamed_tools(url, 5, {}, episode, (10, 3), lambda: budget_s) as tools:
                await tools.call_tool("guess", {"n": 3})
                await tools.call_tool("guess", {"n": 7})
    guesses = [c["arguments"]["n"] for c in calls]
    if budget_s == 0:
        assert isinstance(raised.value, InfraError)
        assert raised.value.cause == "openenv_control_timeout" and guesses == [3, 7]
    else:
        assert isinstance(raised.value, AgentError)
        assert raised.value.cause == "action_failed_environment"
        assert guesses == [3, 7, 3, 7, 3, 3]
