"""The `openenv` handler against a real OpenEnv environment server: openenv-core 0.3.0's own
server (started here, in its own virtual environment) serving a guessing game
(`agentroll.testing.openenv.guess_env`), driven over its WebSocket protocol by the scripted
policy `openenv_guess`. Rewards and observations are what the environment emitted; an
invalid action is the policy's doing; a step the environment fails on is blamed by a replayed
control: the policy's action if the environment answers a control in its place, else
infra_error (a broken environment, a dropped WebSocket)."""

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.server.engine.vllm_server import free_port
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.openenv import guess_server

# A fresh machine installs openenv-core's environment first (a minute or so).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def job(job_id: str, url: str, reset: dict[str, Any], prompt: str = "") -> dict[str, Any]:
    instance = {"server": {"url": url, "timeout_s": 30}, "reset": reset, "prompt": prompt}
    return {"job_id": job_id, "handler": "openenv", "instance": instance}


async def run(
    agentroll_server: ServerFactory, tmp_path: Path, jobs: list[dict[str, Any]]
) -> dict[str, Trajectory]:
    async with (
        scripted_backend(wrong_rate=0.0, policy="openenv_guess") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        return await run_jobs(client, jobs, timeout_s=300)


def feedback(t: Trajectory) -> list[str]:
    return [o["observation"]["feedback"] for o in t.metadata["openenv"]["observations"]]


async def test_episodes_score_what_the_environment_emitted_and_invalid_actions_are_the_policys(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with guess_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("seven", env.url, {"target": 7}),
                job("one", env.url, {"target": 1}),
                job("invalid-then-right", env.url, {"target": 3}, "GUESS 11 FIRST"),
                job("always-invalid", env.url, {"target": 3}, "ALWAYS GUESS 11"),
            ],
        )

    seven = results["seven"]
    assert seven.outcome is Outcome.ok
    # binary search: 5 (higher), 8 (lower), 6 (higher), 7 (correct)
    assert feedback(seven) == ["", "higher", "lower", "higher", "correct"]
    emitted = [o["reward"] for o in seven.metadata["openenv"]["observations"]]
    assert emitted == [None, -0.1, -0.1, -0.1, 1.0]
    assert seven.reward == pytest.approx(sum(r or 0.0 for r in emitted))
    assert seven.reward_info["done"] is True and seven.reward_info["steps"] == 4
    first_user = next(m for m in seven.messages if m["role"] == "user")
    assert '"prompt": "Guess the number from 1 to 10."' in first_user["content"]
    tool_answers = [m["content"] for m in seven.messages if m["role"] == "tool"]
    assert '"feedback": "higher"' in tool_answers[0] and '"reward": -0.1' in tool_answers[0]

    one = results["one"]
    assert one.outcome is Outcome.ok
    assert feedback(one)[-1] == "correct" and one.reward_info["done"] is True

    # 11 is refused by the environment's action model (le=10): an answer the policy sees and
    # corrects, never an infrastructure failure.
    recovered = results["invalid-then-right"]
    assert recovered.outcome is Outcome.ok
    assert recovered.reward_info["invalid_actions"] == 1
    assert feedback(recovered) == ["", "lower", "higher", "correct"]  # 5, 2, 3
    assert recovered.reward == pytest.approx(0.8)
    refusal = next(m["content"] for m in recovered.messages if m["role"] == "tool")
    assert refusal.startswith("Error: step: invalid action")
    assert "less than or equal to 10" in refusal

    stubborn = results["always-invalid"]
    assert stubborn.outcome is Outcome.agent_error and stubborn.reward == 0.0
    assert stubborn.error is not None and stubborn.error.type == "invalid_tool_calls"
    assert stubborn.reward_info["invalid_actions"] == 3 and stubborn.reward_info["done"] is False


async def test_a_dropped_websocket_a_failing_step_or_no_server_is_infra_error(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The environment's process dies at the first step (its WebSocket drops mid-episode),
    its `step` raises, or nothing listens at the URL: nothing the policy did, so never a
    reward."""
    async with guess_server() as env, guess_server() as steady:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("raises", steady.url, {"target": 4, "raise_on_step": True}),
                job("dropped", env.url, {"target": 4, "crash_on_step": True}),
                job("unreachable", f"http://127.0.0.1:{free_port()}", {"target": 4}),
            ],
        )
        assert env.process.returncode is not None  # it really died
        assert steady.process.returncode is None  # a raising step is answered, not fatal

    raises = results["raises"]
    assert raises.outcome is Outcome.infra_error and raises.reward is None
    assert raises.error is not None and raises.error.type == "openenv_error"
    assert "EXECUTION_ERROR" in raises.error.message
    assert "the guessing game's step is broken" in raises.error.message

    dropped = results["dropped"]
    assert dropped.outcome is Outcome.infra_error and dropped.reward is None
    assert dropped.error is not None and dropped.error.type == "openenv_connection_lost"
    assert "dropped during step" in dropped.error.message
    # The control failed too: the step raises on the empty guess as well (no guess was
    # answered to control with).
    assert "fails on the control answer too" in raises.error.message
    assert "EXECUTION_ERROR" in raises.error.message.split("control answer too")[1]
    # The dead server is not replayed (an action that killed it is not sent again).
    assert "the server is unreachable, not replayed" in dropped.error.message
    unreachable = results["unreachable"]
    assert unreachable.outcome is Outcome.infra_error and unreachable.reward is None
    assert unreachable.error is not None and unreachable.error.type == "openenv_error"


async def sessions(env_url: str) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=env_url, timeout=30) as http:
        return dict((await http.get("/sessions")).json())


async def test_a_step_one_action_makes_fail_is_the_policys_when_a_replayed_control_passes(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The environment's `step` raises on one guess only (`raise_on_guess`): replayed in a
    fresh session, the episode fails again on that guess, and replayed in another, its last
    answered guess is answered in its place (the empty guess, 1, where none was), so the
    action was the policy's doing: agent_error with the rewards so far (its escape from a
    low reward closed). Beside it, an honest
    episode on the same server is ok, and an environment whose every step raises is still
    infra_error (the test above)."""
    async with guess_server() as env:
        before = await sessions(env.url)
        results = await run(
            agentroll_server,
            tmp_path,
            [
                # binary search 5 (higher), 8 (lower), then 6 raises
                job("chokes", env.url, {"target": 7, "raise_on_guess": 6}),
                # the first step raises: nothing to replay but the reset
                job("chokes-first", env.url, {"target": 4, "raise_on_guess": 5}),
                # 5, 2, then 1 raises: the empty guess is the failing action, so the last
                # answered one (2) is the control
                job("chokes-on-empty", env.url, {"target": 1, "raise_on_guess": 1}),
                job("honest", env.url, {"target": 7, "raise_on_guess": 9}),
            ],
        )
        # Every session, the controls' too, is closed (the server tears them down after).
        after = await sessions(env.url)
        for _ in range(50):
            if after["open"] == before["open"]:
                break
            await asyncio.sleep(0.2)
            after = await sessions(env.url)

    chokes = results["chokes"]
    assert chokes.outcome is Outcome.agent_error, chokes.error
    assert chokes.error is not None and chokes.error.type == "action_failed_environment"
    assert "the guessing game chokes on 6" in chokes.error.message
    assert feedback(chokes) == ["", "higher", "lower"]
    assert chokes.reward == pytest.approx(-0.2)  # the penalties before the failure stay
    info = chokes.reward_info
    assert info["reason"] == "action_failed_environment"
    assert info["failure_cause"] == "openenv_error" and "chokes on 6" in info["failure"]
    assert info["control"]["passed"] is True
    assert "chokes on 6" in info["control"]["failure_recurred"]
    # The control: the episode's last answered guess (8) in the failing one's place.
    assert '{"guess": 8}' in info["control"]["detail"]
    assert '"feedback": "lower"' in info["control"]["detail"]

    first = results["chokes-first"]
    assert first.outcome is Outcome.agent_error, first.error
    assert first.reward == 0.0 and first.reward_info["control"]["passed"] is True

    empty = results["chokes-on-empty"]
    assert empty.outcome is Outcome.agent_error, empty.error
    assert '{"guess": 2}' in empty.reward_info["control"]["detail"]

    honest = results["honest"]
    assert honest.outcome is Outcome.ok, honest.error
    assert honest.reward == pytest.approx(0.7) and "control" not in honest.reward_info

    # 4 episodes and 3 failures replayed twice each, each its own session, none left open.
    assert after["made"] - before["made"] == 10
    assert after["open"] == before["open"]
