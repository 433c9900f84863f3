"""Adapters pass on what the logprobs are and each token's MoE routing, aligned token for token."""

import base64
import warnings
from typing import Any

import pytest
from tests.unit.trainer_clients.test_adapters import A, B, C, D, traj

from agentroll.server.schema import AgentTrace, LogprobsInfo, RoutedExperts, Trajectory
from agentroll.trainer_clients import Group

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    agent_view,
    pad_batch,
    to_nemo_rl,
    to_openrlhf,
    to_verl,
)

LAYERS, TOP_K = 2, 3
PROCESSED = LogprobsInfo(mode="processed_logprobs", temperature=0.7, top_p=0.9, top_k=40)


def expert(token: int, layer: int, slot: int) -> int:
    """The routing the fake engine gave: readable back from the token it belongs to."""
    return (token * 7 + layer * 3 + slot) % 300


def routed(t: Trajectory, positions: int | None = None) -> Trajectory:
    """`t` with routing for its first `positions` tokens (default: all but the last)."""
    ids = t.prompt_ids + t.response_ids
    n = len(ids) - 1 if positions is None else positions
    rows = [
        [[expert(ids[i], lay, k) for k in range(TOP_K)] for lay in range(LAYERS)] for i in range(n)
    ]
    data = np.asarray(rows, dtype="<u2").tobytes()
    routing = RoutedExperts(
        num_layers=LAYERS,
        top_k=TOP_K,
        positions=n,
        dtype="uint16",
        data=base64.b64encode(data).decode(),
    )
    segments = [s.model_copy(update={"logprobs_mode": PROCESSED.mode}) for s in t.segments]
    fields = {"routed_experts": routing, "logprobs": PROCESSED, "segments": segments}
    return Trajectory.model_validate({**t.model_dump(), **fields})


def moe_groups() -> list[Group]:
    # C ends on an observation the engine never read: its routing stops before it
    c_read = len(C.prompt_ids) + C.segments[-1].end - 1
    return [
        Group("g0", 2, True, [routed(A), routed(B)]),
        Group("g1", 2, True, [routed(C, c_read), routed(D)]),
    ]


def test_verl_gets_routing_aligned_with_input_ids_and_zeros_where_nothing_was_read() -> None:
    groups = moe_groups()
    batch = pad_batch(groups)
    d = to_verl(batch)
    routing, ids = d["batch"]["routed_experts"], d["batch"]["input_ids"]
    assert routing.shape == (4, ids.shape[1], LAYERS, TOP_K) and routing.dtype == np.int16
    for b, t in enumerate(t for g in groups for t in g.trajectories):
        assert t.routed_experts is not None
        start, n = batch.prompt_len - len(t.prompt_ids), t.routed_experts.positions
        for col in range(ids.shape[1]):
            want = (
                [[expert(int(ids[b, col]), lay, k) for k in range(TOP_K)] for lay in range(LAYERS)]
                if start <= col < start + n
                else [[0] * TOP_K] * LAYERS
            )
            assert routing[b, col].tolist() == want, (b, col)
    assert d["meta_info"]["rollout_logprobs"] == [PROCESSED.model_dump()] * 4


def test_routing_is_left_out_unless_every_sample_carries_one_shape() -> None:
    mixed = [Group("g0", 2, True, [routed(A), B]), Group("g1", 2, True, [C, D])]
    d = to_verl(pad_batch(mixed))
    assert "routed_experts" not in d["batch"]
    assert d["meta_info"]["rollout_logprobs"][0] == PROCESSED.model_dump()
    assert d["meta_info"]["rollout_logprobs"][1] is None  # B declares nothing


def test_openrlhf_and_nemo_rl_carry_the_declaration_and_nemo_rl_the_routing() -> None:
    exp = to_openrlhf(pad_batch(moe_groups()))
    assert exp["info"]["rollout_logprobs"] == [PROCESSED.model_dump()] * 4
    rows = to_nemo_rl([routed(A), routed(traj("g1-s0-r0", [16], [([51], [])], 0.5))])
    info = rows[0]["extra_env_info"]
    assert info["logprobs"] == PROCESSED.model_dump()
    tokens = np.concatenate([m["token_ids"] for m in rows[0]["message_log"]])
    assert info["routed_experts"].shape == (len(tokens) - 1, LAYERS, TOP_K)
    assert info["routed_experts"][:, 1, 2].tolist() == [expert(int(t), 1, 2) for t in tokens[:-1]]


def test_verl_reads_the_routing_as_its_own_agent_loop_lays_it_out() -> None:
    torch = pytest.importorskip("torch", reason="the verl checks need the verl-check extra")
    pytest.importorskip("verl", reason="the verl checks need tests/requirements-verl.txt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl import DataProto
        from verl.trainer.ppo.metric_utils import _compute_rollout_moe_load_counts

    d = to_verl(pad_batch(moe_groups()))
    tensors: dict[str, Any] = {k: torch.from_numpy(v) for k, v in d["batch"].items()}
    data = DataProto.from_dict(
        tensors=tensors, non_tensors=d["non_tensor_batch"], meta_info=d["meta_info"]
    )
    counts = _compute_rollout_moe_load_counts(
        data.batch["routed_experts"], data.batch["response_mask"], 300
    )
    # verl counts sampled response tokens but each row's last: the same tokens, by hand
    expected = np.zeros((LAYERS, 300), dtype=np.int64)
    for t in (A, B, C, D):
        sampled = [i for i, m in enumerate(t.response_mask) if m][:-1]
        for i in sampled:
            for lay in range(LAYERS):
                for k in range(TOP_K):
                    expected[lay, expert(t.response_ids[i], lay, k)] += 1
    assert counts is not None and counts.tolist() == expected.tolist()


def test_an_agents_view_carries_its_own_declaration_and_routing_not_the_episodes() -> None:
    mine = routed(traj("g-s0-r0", [7, 8], [([9, 10], [11])], 1.0))
    trace = AgentTrace(
        name="solver",
        policy="solver",
        trainable=True,
        **mine.model_dump(
            include={
                "prompt_ids", "response_ids", "response_mask", "response_logprobs",
                "segments", "policy_versions", "logprobs", "routed_experts",
            }
        ),
    )  # fmt: skip
    raw = LogprobsInfo(mode="raw_logprobs")
    episode = Trajectory(
        job_id="e", handler="h", outcome="ok", status="completed", reward=1.0,
        logprobs=raw, agents=[trace],
    )  # fmt: skip
    view = agent_view(episode, trace)
    assert view.logprobs == PROCESSED and view.routed_experts == mine.routed_experts
    assert Trajectory.model_validate_json(view.model_dump_json()) == view  # still valid
