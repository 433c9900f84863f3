"""The `openenv` handler against a real OpenEnv environment server: openenv-core 0.3.0's own
server (started here, in its own virtual environment) serving a guessing game
(`agentroll.testing.openenv.guess_env`), driven over its WebSocket protocol by the scripted
policy `openenv_guess`. Rewards and observations are what the environment emitted; an
invalid action is the policy's doing; a dropped WebSocket is infra_error."""

from pathlib import Path
from typing import Any

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
    unreachable = results["unreachable"]
    assert unreachable.outcome is Outcome.infra_error and unreachable.reward is None
    assert unreachable.error is not None and unreachable.error.type == "openenv_error"
