"""The trained tiny policy on the real engine: multi-turn, tool-using, exact rollouts.

The policy (`agentroll.testing.tinypolicy`, built once and cached) is served by its own vLLM
CPU engine for this module. It was trained on arithmetic questions of other seeds, so a
reward here means it copied the question into the python tool, read the tool's output and
submitted it.
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentroll.handlers.builtin.arithmetic import parse_arithmetic
from agentroll.server.engine import EngineEnvironment
from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import Trajectory
from agentroll.testing.tinypolicy.build import build_tiny_policy
from agentroll.testing.tinypolicy.evaluate import evaluation_jobs, score, used_a_tool
from agentroll.testing.tinypolicy.rollouts import rollout_client, run_jobs

from .fidelity import sampled_mismatches

ROLLOUTS = 16
# Building the policy (transcripts + training, when not cached) and its engine take minutes.
pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def policy_engine(
    engine_prepared: tuple[EngineEnvironment, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    python = engine_prepared[0].python
    model = asyncio.run(build_tiny_policy(python))
    log = tmp_path_factory.mktemp("tiny-policy-engine") / "vllm.log"
    with VLLMServer(python, model, log, nice=5) as engine:
        yield engine


@pytest.fixture(scope="module")
def policy_rollouts(
    policy_engine: VLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> list[Trajectory]:
    """Unseen arithmetic questions through an in-process agentroll server (bubblewrap)."""

    async def collect() -> list[Trajectory]:
        async with rollout_client(tmp_path_factory.mktemp("agentroll"), policy_engine.url) as c:
            return await run_jobs(c, evaluation_jobs(ROLLOUTS, bundled=False))

    return asyncio.run(collect())


def _tool_rollout_with_reward(trajectories: list[Trajectory]) -> Trajectory:
    found = [t for t in trajectories if used_a_tool(t) and t.reward == 1.0]
    assert found, f"no tool-using rollout earned reward 1: {score(trajectories)}"
    return found[0]


def test_the_policy_calls_the_python_tool_reads_it_and_submits(
    policy_rollouts: list[Trajectory],
) -> None:
    assert all(t.outcome.value in ("ok", "agent_error") for t in policy_rollouts), [
        (t.job_id, t.outcome.value, t.error) for t in policy_rollouts
    ]
    t = _tool_rollout_with_reward(policy_rollouts)
    task = parse_arithmetic(t.messages[1]["content"])
    assert task is not None
    calls = [c["function"] for m in t.messages if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [c["name"] for c in calls][-2:] == ["python", "submit"]
    tool_output = next(m["content"] for m in t.messages if m["role"] == "tool")
    assert tool_output.strip() == task.answer
    assert t.reward_info["predicted"] == task.answer
    assert t.num_turns >= 2
    # Two sampled turns with the tool's output between them, which the policy did not sample.
    assert len(t.segments) >= 2
    between = t.response_mask[t.segments[0].end : t.segments[1].start]
    assert between and not any(between)


async def test_tool_using_rollouts_are_exact_on_the_engine(
    policy_rollouts: list[Trajectory], policy_engine: VLLMServer
) -> None:
    t = _tool_rollout_with_reward(policy_rollouts)
    assert await sampled_mismatches(policy_engine.url, t) == []
