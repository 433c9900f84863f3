"""A 30-turn SWE rollout (explore, edit, test, submit) satisfies every trajectory invariant
(docs/design.md, invariants 1-4), checked against what the scripted backend really returned
for each turn."""

import shutil
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import (
    request_log,
    rollout_service,
    run_jobs,
    scripted_backend,
)

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.server.schema import Outcome
from agentroll.testing.scripted_llm import default_rules
from agentroll.testing.scripted_llm.rules.swe import make_swe_rule

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

TURNS = 30


async def test_thirty_turn_swe_rollout_keeps_every_invariant(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    rules = default_rules()
    rules.register("swe", make_swe_rule(explore_turns=TURNS - 6), replace=True)
    task = load_swe_tasks()[2]
    job = {"job_id": "long", "handler": "swe", "instance": task.instance, "sampling": {"seed": 5}}
    async with (
        scripted_backend(wrong_rate=0.0, rules=rules, max_model_len=32768) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        t = (await run_jobs(client, [job]))["long"]
        log = await request_log(backend)
    assert (t.outcome, t.reward, t.finish_reason) == (Outcome.ok, 1.0, "submit")
    assert t.num_turns == len(log) == TURNS == len(t.segments)
    # Invariant 2.
    assert len(t.response_ids) == len(t.response_mask) == len(t.response_logprobs)
    for k, (seg, call) in enumerate(zip(t.segments, log, strict=True)):
        # Invariant 1: masked-in ids are exactly what the backend sampled, with its logprobs.
        assert t.response_ids[seg.start : seg.end] == call["token_ids"]
        assert t.response_mask[seg.start : seg.end] == [1] * (seg.end - seg.start)
        assert t.response_logprobs[seg.start : seg.end] == call["logprobs"]
        # Invariant 3: each prompt is the first prompt + everything recorded before it.
        assert call["prompt_token_ids"] == t.prompt_ids + t.response_ids[: seg.start]
        if k:  # between turns: the tool observation, never trained on
            between = range(t.segments[k - 1].end, seg.start)
            assert between and all(t.response_mask[i] == 0 for i in between)
            assert all(t.response_logprobs[i] == 0.0 for i in between)
    assert t.segments[-1].end == len(t.response_ids)  # the trajectory ends on a sampled turn
    # Invariant 4.
    assert t.policy_versions == [0] and {s.policy_version for s in t.segments} == {0}
    # Every turn but the last called a tool and got its observation back.
    tool_messages = [m for m in t.messages if m["role"] == "tool"]
    assert len(tool_messages) == TURNS - 1
    assert all(m["tool_call_id"] and m["name"] for m in tool_messages)
    # The readable view carries each reply's parsed calls in OpenAI form, matching the results.
    replies = [m for m in t.messages if m["role"] == "assistant"]
    call_ids = [c["id"] for m in replies for c in m.get("tool_calls", [])]
    assert call_ids == [m["tool_call_id"] for m in tool_messages] + [call_ids[-1]]  # + submit
    assert all(
        isinstance(c["function"]["arguments"], str)
        for m in replies
        for c in m.get("tool_calls", [])
    )
    assert t.timing.tool_calls == TURNS and sum(t.metadata["tool_calls"].values()) == TURNS
    assert t.metadata["agent"] == {"ended": "submit", "turns": TURNS, "invalid_tool_calls": 0}
    assert t.artifacts["patch"].startswith("diff --git a/ledger/money.py")
