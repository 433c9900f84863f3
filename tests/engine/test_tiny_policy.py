"""The trained tiny policy on the real engine: multi-turn, tool-using, exact rollouts.

The lane's policy (`agentroll.testing.tinypolicy`, `LANE_RECIPE`, built once and cached) is
served by its own vLLM CPU engine for this module, on held-out arithmetic questions its
training never saw. It has learnt the protocol (call `python`, read the output, `submit`),
so these tests assert the tool use and exactness; the longer `POLICY_RECIPE` that earns
reward is measured by `python -m agentroll.testing.tinypolicy evaluate` (docs/tinypolicy.md).
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.engine.fidelity import sampled_mismatches

from agentroll.server.engine import EngineEnvironment
from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.schema import Trajectory
from agentroll.testing.tinypolicy.build import LANE_RECIPE, build_tiny_policy
from agentroll.testing.tinypolicy.evaluate import evaluation_jobs, score, used_a_tool
from agentroll.testing.tinypolicy.rollouts import rollout_client, run_jobs

ROLLOUTS = 16
# Building the policy (transcripts + training, when not cached) and its engine take minutes.
pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def policy_engine(
    engine_prepared: tuple[EngineEnvironment, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    python = engine_prepared[0].python
    model = asyncio.run(build_tiny_policy(python, recipe=LANE_RECIPE))
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


def _tool_rollout(trajectories: list[Trajectory]) -> Trajectory:
    """A rollout where the policy ran `python`, got its output back and took another turn."""
    found = [t for t in trajectories if used_a_tool(t)]
    assert found, f"no rollout used the python tool: {score(trajectories)}"
    return max(found, key=lambda t: t.reward or 0.0)


def test_the_policy_calls_the_python_tool_and_reads_its_output(
    policy_rollouts: list[Trajectory],
) -> None:
    assert all(t.outcome.value in ("ok", "agent_error") for t in policy_rollouts), [
        (t.job_id, t.outcome.value, t.error) for t in policy_rollouts
    ]
    assert all(t.reward is not None for t in policy_rollouts)
    t = _tool_rollout(policy_rollouts)
    calls = [
        c["function"]["name"]
        for m in t.messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]
    assert "python" in calls
    assert any(m["role"] == "tool" and m.get("name") == "python" for m in t.messages)
    assert t.num_turns >= 2
    # Two sampled turns with the tool's output between them, which the policy did not sample.
    assert len(t.segments) >= 2
    between = t.response_mask[t.segments[0].end : t.segments[1].start]
    assert between and not any(between)


def test_tool_using_rollouts_are_exact_on_the_engine(
    policy_rollouts: list[Trajectory], policy_engine: VLLMServer
) -> None:
    for t in [t for t in policy_rollouts if used_a_tool(t)][:4]:
        assert asyncio.run(sampled_mismatches(policy_engine.url, t)) == [], t.job_id
