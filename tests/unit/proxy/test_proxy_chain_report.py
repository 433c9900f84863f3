"""Every chain of a harness run as a trainable sample: `Trajectory.chains` and the report."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from agentroll.handlers import ProxyStop
from agentroll.server.proxy.chains import ChainBook, Piece
from agentroll.server.proxy.recording import chain_traces, report
from agentroll.server.schema import ChainTrace, Outcome, Segment, Trajectory


@dataclass
class Record:
    """What a rollout's proxy recorded, without the proxy."""

    book: ChainBook
    calls: list[dict[str, Any]] = field(default_factory=list)
    sampled_tokens: int = 0
    context_overflows: int = 0
    mixed_version_segments: int = 0
    refused: Mapping[str, int] = field(default_factory=dict)
    stopped: ProxyStop | None = None


def run(steps: list[tuple[list[int], list[int], int]]) -> Record:
    """Token-prompt calls `(prompt, sampled ids, policy version)`, in order."""
    book, calls = ChainBook(), []
    for call, (prompt, sampled, version) in enumerate(steps):
        placement = book.place(call, prompt, [], None)
        pieces = [Piece(sampled, [-0.25] * len(sampled), "b0", version, "stop", "raw_logprobs")]
        book.commit(call, placement, pieces, [])
        calls.append({"call": call, "chain_id": placement.chain.index})
    return Record(book, calls=calls)


COMPACTED = [
    ([1, 2], [3], 0),  # the loop
    ([7, 7], [8, 8], 0),  # a title beside it
    ([1, 2, 3, 4], [5], 0),
    ([5, 5, 3, 5], [9, 9, 9, 9], 1),  # history replaced by a summary; weights updated
    ([5, 5, 3, 5, 9, 9, 9, 9, 6], [10], 1),
]


def test_every_other_chain_is_a_sample_with_its_own_tokens_kind_and_versions() -> None:
    record = run(COMPACTED)
    traces = chain_traces(record, {"temperature": 0.7})
    assert [(c.index, c.kind, c.calls) for c in traces] == [
        (0, "continuation", [0, 2]),
        (1, "side", [1]),
    ]
    loop, title = traces
    assert (loop.prompt_ids, loop.response_ids, loop.response_mask) == (
        [1, 2],
        [3, 4, 5],
        [1, 0, 1],
    )
    assert loop.response_logprobs == [-0.25, 0.0, -0.25]
    assert [(s.start, s.end) for s in loop.segments] == [(0, 1), (2, 3)]
    assert (loop.policy_versions, loop.num_turns) == ([0], 2)
    assert loop.logprobs is not None and loop.logprobs.temperature == 0.7
    assert loop.logprobs.mode == "raw_logprobs"
    assert (title.prompt_ids, title.response_ids, title.response_mask) == ([7, 7], [8, 8], [1, 1])


def test_the_report_names_each_chains_kind_and_counts_the_loop_only() -> None:
    proxy = report(run(COMPACTED))
    assert [(c["index"], c["kind"], c["main"]) for c in proxy["chains"]] == [
        (2, "main", True),
        (0, "continuation", False),
        (1, "side", False),
    ]
    # The loop: chain 0 extended once, then chain 2 once, one break between them; the title
    # is neither an extension nor a break.
    assert (proxy["prefix_extended"], proxy["prefix_broken"]) == (2, 1)
    # A side call is one outside the loop: the title only, not the loop before compaction.
    assert proxy["num_chains"] == 3 and proxy["side_calls"] == 1
    assert [(c["chain"], c["side"]) for c in proxy["call_log"]] == [
        (0, False),
        (1, True),
        (0, False),
        (2, False),
        (2, False),
    ]
    # The other chains keep their token fields here too, for readers of these keys.
    traces = {c.index: c for c in chain_traces(run(COMPACTED), {})}
    for entry in proxy["chains"][1:]:
        assert entry["response_ids"] == traces[entry["index"]].response_ids
    assert "response_ids" not in proxy["chains"][0]


def test_one_chain_has_no_other_samples() -> None:
    record = run([([1], [2], 0), ([1, 2, 3], [4], 0)])
    assert chain_traces(record, {}) == []
    assert report(record)["prefix_extended"] == 1


def trajectory(**fields: Any) -> Trajectory:
    return Trajectory(job_id="j", handler="harness", outcome=Outcome.ok, status="completed",
                      reward=1.0, **fields)  # fmt: skip


def test_a_trajectory_without_chains_serialises_as_before_and_one_with_them_round_trips() -> None:
    assert "chains" not in trajectory().model_dump_json()
    traces = chain_traces(run(COMPACTED), {})
    t = trajectory(chains=traces)
    again = Trajectory.model_validate_json(t.model_dump_json())
    assert again.chains == traces
    # An old consumer's model (no `chains` field) still reads it.
    assert Trajectory.model_validate({**t.model_dump(), "chains": None}).chains is None


def test_a_chain_is_held_to_the_token_invariants() -> None:
    with pytest.raises(ValidationError, match="equal lengths"):
        ChainTrace(index=1, kind="side", response_ids=[1, 2], response_mask=[1],
                   response_logprobs=[0.0, 0.0])  # fmt: skip
    with pytest.raises(ValidationError, match="outside response"):
        ChainTrace(index=1, kind="side", response_ids=[1], response_mask=[1],
                   response_logprobs=[0.0],
                   segments=[Segment(start=0, end=2, backend_id="b", policy_version=0,
                                     finish_reason="stop")])  # fmt: skip
