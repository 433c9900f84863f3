"""The `verifiers` handler with a taskset's tools, end to end: a real verifiers 0.4.0 taskset
whose tasks declare a `vf.Toolset` (`agentroll-vf-tools` in `tests/fixtures/verifiers_env_pkg`),
a real `agentroll serve` and the scripted backend (`calculator`: calls the toolset's
`calculator_add`, then answers with what it answered). The tool runs in the environment's
confined worker; every rollout's reward is what the environment's own reward functions give
on the same conversation, computed here by verifiers itself; tokens are the backend's."""

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.verifiers_reference import (
    PACKAGE,
    reference_rewards,
    run_verifiers_jobs,
)

from agentroll.handlers.builtin.verifiers_env import verifiers_instances
from agentroll.server.schema import Outcome, Trajectory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

TASKSET = "agentroll-vf-tools"


async def run_tool_jobs(
    agentroll_server: ServerFactory, tmp_path: Path, instances: list[dict[str, Any]]
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    return await run_verifiers_jobs(
        agentroll_server, tmp_path, instances, policy="calculator", group_id="add"
    )


async def test_a_tasks_tools_run_in_its_environment_and_its_rewards_grade_the_conversation(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    instances = await verifiers_instances(TASKSET, [PACKAGE], score_timeout_s=120)
    assert [i["task"]["id"] for i in instances] == ["add-0", "add-1", "add-2"]

    results, log = await run_tool_jobs(agentroll_server, tmp_path, instances)

    # The policy calls `calculator_add` only where the prompt offers it by that name (as
    # verifiers' harness names it); its answers are the toolset's own.
    tool_answers = {
        j: [m["content"] for m in t.messages if m["role"] == "tool"] for j, t in results.items()
    }
    assert tool_answers == {
        "add-0": ["5"],
        "add-1": ["42"],
        # the tool raised on the model's call: its error is the model's to read
        "add-2": ["Error executing tool add: this calculator adds non-negative numbers only"],
    }
    replies = {j: t.messages[-1]["content"] for j, t in results.items()}
    assert replies == {"add-0": "5", "add-1": "42", "add-2": "I could not add them."}
    expected = await reference_rewards(TASKSET, [(j, list(t.messages)) for j, t in results.items()])
    # correct (weight 1) + used_tool (weight 0.5)
    assert expected == {"add-0": 1.5, "add-1": 1.5, "add-2": 0.0}
    assert {j: t.reward for j, t in results.items()} == expected, {
        j: (t.outcome, t.error, t.reward_info) for j, t in results.items()
    }
    assert all(t.outcome is Outcome.ok for t in results.values())
    assert results["add-0"].reward_info["rewards"] == {"correct": 1.0, "used_tool": 1.0}

    # Tokens exact: two backend calls per rollout; the sampled ids are the backend's, the
    # tool's answer between them is masked out.
    assert len(log) == 2 * len(results)
    by_prompt = {tuple(c["prompt_token_ids"]): c for c in log}
    for t in results.values():
        assert len(t.segments) == 2
        for seg in t.segments:
            call = by_prompt[tuple(t.prompt_ids + t.response_ids[: seg.start])]
            assert t.response_ids[seg.start : seg.end] == list(call["token_ids"])
            assert t.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
        between = range(t.segments[0].end, t.segments[1].start)
        assert between and all(t.response_mask[i] == 0 for i in between)
