"""The `openreward` handler against a real Open Reward Standard server: openreward 0.1.167's
own environment server (started here, in its own virtual environment) serving a guessing game
and a quiz (`agentroll.testing.openreward.guess_env`), played by the scripted policy
(`openreward_guess`, `echo`). Rewards are what the environment emitted; arguments its input
model refuses are the policy's doing; a reward missing at the finish is blamed by a control; a
server that fails, drops or cannot be reached is infra_error; the session is deleted."""

from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend

from agentroll.server.engine.vllm_server import free_port
from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.openreward import openreward_server

# A fresh machine installs openreward's environment first (a minute or so).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def job(job_id: str, url: str, timeout_s: float = 30, **instance: Any) -> dict[str, Any]:
    instance = {"server": {"url": url, "timeout_s": timeout_s}, **instance}
    return {"job_id": job_id, "handler": "openreward", "instance": instance}


async def run(
    agentroll_server: ServerFactory, tmp_path: Path, jobs: list[dict[str, Any]]
) -> dict[str, Trajectory]:
    async with (
        scripted_backend(wrong_rate=0.0, policy=["openreward_guess", "echo"]) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        return await run_jobs(client, jobs, timeout_s=300)


def answers(t: Trajectory) -> list[str]:
    return [m["content"] for m in t.messages if m["role"] == "tool"]


async def session_alive(url: str, sid: str) -> bool:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        ping = await http.post(f"{url}/ping", headers={"X-Session-ID": sid})
    assert ping.status_code in (200, 404), ping.text
    return ping.status_code == 200


async def test_episodes_score_what_the_environment_emitted_and_refused_calls_are_the_policys(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    async with openreward_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("seven", env.url, environment="guessgame", task_spec={"target": 7}),
                # No environment named: the server's first; the task by split and index.
                job("by-index", env.url, split="train", index=0),
                job(
                    "refused-then-right", env.url, task_spec={"target": 3}, prompt="GUESS 11 FIRST"
                ),
                job("always-refused", env.url, task_spec={"target": 3}, prompt="ALWAYS GUESS 11"),
                job("quiz", env.url, environment="quiz", split="test", index=0),
                job(
                    "quiz-wrong",
                    env.url,
                    environment="quiz",
                    task_spec={"question": "Repeat after me: 41", "answer": "42"},
                ),
            ],
        )
        sessions = {k: t.metadata["openreward"]["session"] for k, t in results.items()}
        alive = [k for k, sid in sessions.items() if await session_alive(env.url, sid)]

    assert alive == []  # every session deleted, whatever the outcome
    seven = results["seven"]
    assert seven.outcome is Outcome.ok
    # binary search: 5 (higher), 8 (lower), 6 (higher), 7 (correct)
    assert answers(seven) == ["higher", "lower", "higher"]  # the finishing answer ends the loop
    assert seven.reward_info["rewards"] == [0.0, 0.0, 0.0, 1.0]
    assert seven.reward == 1.0 and seven.reward_info["finished"] is True
    first_user = next(m for m in seven.messages if m["role"] == "user")
    assert first_user["content"] == "Guess the number from 1 to 10 with the guess tool."
    assert [c["tool"] for c in seven.metadata["openreward"]["calls"]] == ["guess"] * 4

    by_index = results["by-index"]  # target 1: 5, 2, 1
    assert by_index.outcome is Outcome.ok and by_index.reward == 1.0
    assert by_index.reward_info["rewards"] == [0.0, 0.0, 1.0]

    # 11 is refused by the tool's input model (le=10): an answer the policy sees and corrects.
    recovered = results["refused-then-right"]
    assert recovered.outcome is Outcome.ok and recovered.reward == 1.0
    assert recovered.reward_info["invalid_calls"] == 1
    refusal = answers(recovered)[0]
    assert refusal.startswith("Error: guess: Tool input validation error")
    assert "less than or equal to 10" in refusal

    stubborn = results["always-refused"]
    assert stubborn.outcome is Outcome.agent_error and stubborn.reward == 0.0
    assert stubborn.error is not None and stubborn.error.type == "invalid_tool_calls"
    assert stubborn.reward_info["invalid_calls"] == 3 and stubborn.reward_info["finished"] is False

    # The quiz has only a terminal tool: the policy's plain reply is its answer.
    quiz, wrong = results["quiz"], results["quiz-wrong"]
    assert quiz.outcome is Outcome.ok and quiz.reward == 1.0 and quiz.reward_info["finished"]
    assert wrong.outcome is Outcome.ok and wrong.reward == 0.0 and wrong.reward_info["finished"]
    assert [c["tool"] for c in quiz.metadata["openreward"]["calls"]] == ["answer"]


async def test_a_missing_reward_is_blamed_by_a_control_and_a_failing_server_is_infra_error(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """The game finishes the policy's episode without a reward (NaN on the wire is `null`):
    when an empty answer in a fresh session is answered properly, the policy's answer broke it
    (reward 0); when it is not, the environment is broken (infra_error). A tool that raises, a
    server that answers 500, dies mid-episode or that nothing listens for: never a reward."""
    async with openreward_server() as env, openreward_server() as doomed:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job(
                    "nan-on-correct",
                    env.url,
                    task_spec={"target": 4, "broken_reward": "on_correct"},
                ),
                job("nan-always", env.url, task_spec={"target": 4, "broken_reward": "always"}),
                job("raises", env.url, task_spec={"target": 4, "raise_on_guess": True}),
                job("unknown-env", env.url, environment="nope", task_spec={"target": 4}),
                job("http-500", env.url, task_spec={"target": 4, "raise_on_prompt": True}),
                job("dropped", doomed.url, task_spec={"target": 4, "crash_on_guess": True}),
                job("unreachable", f"http://127.0.0.1:{free_port()}", task_spec={"target": 4}),
            ],
        )
        assert doomed.process.returncode is not None  # it really died
        assert env.process.returncode is None  # a raising tool is answered, not fatal

    blamed = results["nan-on-correct"]
    assert blamed.outcome is Outcome.ok and blamed.reward == 0.0
    assert blamed.reward_info["reason"] == "reward_failed_on_answer"
    assert blamed.reward_info["failure_cause"] == "openreward_bad_reward"
    assert blamed.reward_info["control"]["passed"] is True
    assert blamed.reward_info["rewards"][-1] is None and blamed.reward_info["finished"] is True

    broken = results["nan-always"]
    assert broken.outcome is Outcome.infra_error and broken.reward is None
    assert broken.error is not None and broken.error.type == "openreward_bad_reward"
    assert "to the empty answer too" in broken.error.message

    raises = results["raises"]
    assert raises.outcome is Outcome.infra_error and raises.reward is None
    assert raises.error is not None and raises.error.type == "openreward_error"
    assert "the guessing game's tool is broken" in raises.error.message

    unknown = results["unknown-env"]
    assert unknown.outcome is Outcome.infra_error and unknown.error is not None
    assert (
        unknown.error.type == "openreward_error" and "unknown environment" in unknown.error.message
    )

    http_500 = results["http-500"]
    assert http_500.outcome is Outcome.infra_error and http_500.reward is None
    assert http_500.error is not None and http_500.error.type == "openreward_error"
    assert "HTTP 500" in http_500.error.message
    assert "the guessing game has no prompt" in http_500.error.message

    dropped = results["dropped"]
    assert dropped.outcome is Outcome.infra_error and dropped.reward is None
    assert dropped.error is not None and dropped.error.type == "openreward_connection_lost"
    unreachable = results["unreachable"]
    assert unreachable.outcome is Outcome.infra_error and unreachable.reward is None
    assert unreachable.error is not None and unreachable.error.type == "openreward_unreachable"

    # A tool raising on every answer, the empty one too: the environment is broken.
    assert "on the control answer too" in raises.error.message


async def test_a_tool_call_the_policy_makes_fail_is_blamed_by_the_control_not_resampled(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    """What the policy asks a tool can make it raise, run past `timeout_s` or answer over
    16 MiB: the episode ends there and the control (a fresh session, the empty answer) decides.
    Answered: the policy's doing, reward 0 (never infra_error, which the trainer would resample);
    failing too: infra_error. Beside each, an honest episode still earns its reward."""
    above_5 = {"target": 7, "fail_above": 5}  # binary search: 5 (higher), then 8
    below_5 = {"target": 3, "fail_above": 5}  # 5 (lower), 2 (higher), 3: never above 5
    quiz = {"answer": "42", "numeric": True}
    penalised = {**above_5, "step_reward": -0.5}
    async with openreward_server() as env:
        results = await run(
            agentroll_server,
            tmp_path,
            [
                job("raise", env.url, task_spec={**above_5, "failure": "raise"}),
                job("raise-honest", env.url, task_spec={**below_5, "failure": "raise"}),
                # Each wrong guess costs 0.5: breaking the tool must not wipe the penalty out.
                job("penalised", env.url, task_spec={**penalised, "failure": "raise"}),
                job("sleep", env.url, task_spec={**above_5, "failure": "sleep"}, timeout_s=10),
                job("sleep-honest", env.url, task_spec={**below_5, "failure": "sleep"}),
                # Every guess hangs, the control's too: the environment's fault.
                job(
                    "sleep-always",
                    env.url,
                    task_spec={"target": 7, "fail_above": 0, "failure": "sleep"},
                    timeout_s=10,
                ),
                job("huge", env.url, task_spec={**above_5, "failure": "huge"}),
                job("huge-honest", env.url, task_spec={**below_5, "failure": "huge"}),
                # The terminal tool parses the policy's plain reply as a number.
                job(
                    "quiz-words",
                    env.url,
                    environment="quiz",
                    task_spec={"question": "Repeat after me: forty-two", **quiz},
                ),
                job(
                    "quiz-digits",
                    env.url,
                    environment="quiz",
                    task_spec={"question": "Repeat after me: 42", **quiz},
                ),
            ],
        )
        sessions = {k: t.metadata["openreward"]["session"] for k, t in results.items()}
        alive = [k for k, sid in sessions.items() if await session_alive(env.url, sid)]

    assert alive == []
    failures = {
        "raise": ("openreward_error", "the game cannot take 8"),
        "sleep": ("openreward_timeout", "no answer within 10 s"),
        "huge": ("openreward_error", "answer over 16 MiB"),
    }
    for name, (cause, said) in failures.items():
        failed, honest = results[name], results[f"{name}-honest"]
        assert failed.outcome is Outcome.ok and failed.reward == 0.0, (name, failed.error)
        assert failed.reward_info["reason"] == "tool_failed_on_answer"
        assert failed.reward_info["failure_cause"] == cause
        assert said in failed.reward_info["failure"]
        assert failed.reward_info["control"]["passed"] is True
        # The failed call ended the episode: 5 was answered, 8 was not.
        assert failed.reward_info["rewards"] == [0.0] and failed.reward_info["finished"] is False
        assert honest.outcome is Outcome.ok and honest.reward == 1.0, (name, honest.error)
        assert honest.reward_info["rewards"] == [0.0, 0.0, 1.0]

    penalised_run = results["penalised"]
    assert penalised_run.outcome is Outcome.ok, penalised_run.error
    assert penalised_run.reward_info["reason"] == "tool_failed_on_answer"
    assert penalised_run.reward_info["rewards"] == [-0.5] and penalised_run.reward == -0.5

    hung = results["sleep-always"]
    assert hung.outcome is Outcome.infra_error and hung.reward is None
    assert hung.error is not None and hung.error.type == "openreward_timeout"
    assert "on the control answer too" in hung.error.message

    words, digits = results["quiz-words"], results["quiz-digits"]
    assert words.outcome is Outcome.ok and words.reward == 0.0, words.error
    assert words.reward_info["reason"] == "tool_failed_on_answer"
    assert "invalid literal for int()" in words.reward_info["failure"]
    assert digits.outcome is Outcome.ok and digits.reward == 1.0 and digits.reward_info["finished"]
