"""A failed OpenEnv `step` blamed by a replayed control (`openenv.replay.judged`), against a
scripted session endpoint: the doors openenv-core's own server does not open cheaply (a
WebSocket dropped by a live server, an environment that answers differently each time)."""

import asyncio
import itertools
from typing import Any

import aiohttp
import pytest

from agentroll.handlers.builtin.openenv import replay as replay_module
from agentroll.handlers.builtin.openenv import session as session_module
from agentroll.handlers.builtin.openenv.replay import empty_action, judged
from agentroll.handlers.builtin.openenv.session import Episode, Session, open_session
from agentroll.handlers.errors import AgentError, InfraError, StepFailed
from agentroll.testing.openenv import StepScript, scripted_env

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
SCHEMA["required"] = ["n"]
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
        verdict = await judged(failure, session, empty_action(SCHEMA), episode)
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    # Replayed twice: the failing guess again (it fails again), then the empty guess in its
    # place (answered).
    assert steps == [3, 4, 7, 3, 4, 7, 3, 4, 1]
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
        verdict = await judged(failure, session, empty_action(SCHEMA), episode)
    assert isinstance(verdict, InfraError) and verdict.cause == "openenv_error"
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
        verdict = await judged(failure, session, empty_action(SCHEMA), episode)
    assert isinstance(verdict, InfraError) and not isinstance(verdict, StepFailed)
    assert verdict.cause == "openenv_error"
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
        verdict = await judged(failure, session, empty_action(SCHEMA), episode)
    assert failure.cause == "openenv_connection_lost"
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert episode.blame is not None and episode.blame["failure_cause"] == "openenv_connection_lost"


async def test_an_environment_that_fails_on_the_control_too_is_infra_naming_both() -> None:
    async def broken(frame: dict[str, Any]) -> dict[str, Any]:
        n = frame["data"]["n"]
        return answer({"echo": n}) if n == 2 else BOOM

    async with scripted_env(broken) as url:
        session, failure, episode = await failed_episode(url, [2, 7])
        verdict = await judged(failure, session, empty_action(SCHEMA), episode)
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
        verdict = await judged(raised.value, session, empty_action(SCHEMA), episode)
    assert raised.value.cause == "openenv_timeout"
    assert isinstance(verdict, AgentError) and verdict.cause == "action_failed_environment"
    assert steps == [4, 7, 4, 7, 4, 1]
    assert episode.blame is not None
    assert "no answer to step" in episode.blame["control"]["failure_recurred"]
