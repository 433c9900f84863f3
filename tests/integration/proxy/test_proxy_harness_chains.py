"""A harness that makes a side call and compacts its context, run by the `harness` handler in
a real bubblewrap sandbox: every chain comes back as a trainable sample, each exact against
the backend's log, and a trainer can batch them all."""

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import (
    request_log,
    rollout_service,
    run_jobs,
    scripted_backend,
)
from tests.integration.proxy.proxy_support import assert_chain_exact

from agentroll.server.schema import Outcome, Trajectory
from agentroll.testing.scripted_llm.rules.compaction import COMPACT, COMPACTING_HARNESS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

ANSWER = "so the sum of the first twenty positive integers is twenty times twenty-one over two"
TURNS = ["one", "two", COMPACT, "three", f"{ANSWER}, \\boxed{{210}}"]


def job(job_id: str, turns: list[str]) -> dict[str, Any]:
    command = ["python3", "-c", COMPACTING_HARNESS, *turns]
    return {
        "job_id": job_id,
        "group_id": "sum",
        "handler": "harness",
        "instance": {
            "harness": {"type": "shell", "command": command},
            "evaluator": "math",
            "task": {
                "question": "What is the sum of the first 20 positive integers?",
                "answer": "210",
            },
        },
        "sampling": {"seed": 7},
    }


async def run(
    agentroll_server: ServerFactory, tmp_path: Path, jobs: list[dict[str, Any]]
) -> tuple[dict[str, Trajectory], list[dict[str, Any]]]:
    async with (
        scripted_backend(wrong_rate=0.0, policy="compaction,echo") as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        done = await run_jobs(client, jobs, timeout_s=100)
        return done, await request_log(backend)


@pytest.mark.timeout(120)
async def test_a_compacting_harness_with_a_side_call_returns_every_chain_exact(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    done, log = await run(agentroll_server, tmp_path, [job("compacted", TURNS)])
    t = done["compacted"]
    # The honest run earns its reward: the answer after the compaction is graded.
    assert t.outcome == Outcome.ok and t.reward == 1.0, (t.error, t.metadata.get("harness"))
    proxy = t.metadata["llm_proxy"]
    # Six calls: turn one, the title, turn two, the summary (still the loop's first chain),
    # then turns three and four from the summary (a chain of their own).
    assert proxy["calls"] == len(log) == 6 and proxy["num_chains"] == 3
    assert [(c["kind"], c["calls"]) for c in proxy["chains"]] == [
        ("main", [4, 5]),
        ("continuation", [0, 2, 3]),
        ("side", [1]),
    ]
    # Counted on the agent's loop: three extensions, one break (the compaction); the title
    # is neither.
    assert (proxy["prefix_extended"], proxy["prefix_broken"]) == (3, 1)
    assert proxy["side_calls"] == 1 and [c["side"] for c in proxy["call_log"]] == [
        False,
        True,
        False,
        False,
        False,
        False,
    ]
    before, aside = proxy["chains"][1:]
    assert before["broken"]["by_call"] == 4 and before["broken"]["reason"] == "history_rewritten"

    # Every chain is a sample: the main one in the token fields, the others in `chains`.
    assert t.chains is not None
    assert [(c.index, c.kind, c.calls) for c in t.chains] == [
        (before["index"], "continuation", [0, 2, 3]),
        (aside["index"], "side", [1]),
    ]
    samples = [t, *t.chains]
    for sample in samples:
        assert_chain_exact(sample, log)
        assert sample.policy_versions == [0] and sample.logprobs is not None
    # Together they hold every call the backend served, each once, and nothing else sampled.
    assert sum(len(s.segments) for s in samples) == len(log)
    assert sum(sum(s.response_mask) for s in samples) == sum(len(e["token_ids"]) for e in log)
    summary_call, title_call = log[3], log[1]
    loop, title = t.chains
    assert loop.response_ids[loop.segments[-1].start :] == summary_call["token_ids"]
    assert title.prompt_ids == title_call["prompt_token_ids"] and title.num_turns == 1
    assert title.response_ids == title_call["token_ids"]
    assert t.messages[-1]["content"].endswith("\\boxed{210}")


@pytest.mark.timeout(120)
async def test_a_group_of_compacting_runs_batches_every_chain_with_its_episodes_advantage(
    agentroll_server: ServerFactory, tmp_path: Path
) -> None:
    np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
    from agentroll.trainer_clients.adapters import grpo_advantages, pad_batch

    wrong = [*TURNS[:-1], f"{ANSWER}, \\boxed{{200}}"]
    done, log = await run(agentroll_server, tmp_path, [job("right", TURNS), job("wrong", wrong)])
    right, bad = done["right"], done["wrong"]
    assert (right.reward, bad.reward) == (1.0, 0.0)  # the control earns it, the other does not
    batch = pad_batch([right, bad], chains="all")
    assert batch.chain_kinds == ["main", "continuation", "side"] * 2
    assert batch.episode_ids == ["right"] * 3 + ["wrong"] * 3
    assert batch.rewards.tolist() == [1.0] * 3 + [0.0] * 3
    assert batch.advantages.tolist() == pytest.approx(
        [a for a in grpo_advantages([1.0, 0.0], ["sum", "sum"]) for _ in range(3)]
    )
    # Each row is its chain, token for token, and trains exactly on what the backend sampled.
    by_prompt = {tuple(e["prompt_token_ids"]): e for e in log}
    P = batch.prompt_len
    for row, sample in enumerate([s for t in (right, bad) for s in (t, *(t.chains or []))]):
        p, r = len(sample.prompt_ids), len(sample.response_ids)
        assert (
            batch.input_ids[row, P - p : P + r].tolist() == sample.prompt_ids + sample.response_ids
        )
        mask = batch.loss_mask[row, P : P + r]
        assert mask.tolist() == sample.response_mask and batch.loss_mask[row].sum() == mask.sum()
        sampled = [int(i) for i in batch.input_ids[row, P : P + r][mask == 1]]
        calls = [
            by_prompt[tuple(sample.prompt_ids + sample.response_ids[: s.start])]
            for s in sample.segments
        ]
        assert sampled == [i for call in calls for i in call["token_ids"]]
        logprobs = batch.old_logprobs[row, P : P + r][mask == 1]
        assert np.allclose(logprobs, [x for call in calls for x in call["logprobs"]])
