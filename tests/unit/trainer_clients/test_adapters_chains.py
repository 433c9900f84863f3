"""Harness chains as samples: the trainer picks chain kinds; rows, masks and rewards line up
with each chain; every row of an episode gets its episode's advantage."""

import pytest

from agentroll.server.schema import ChainTrace, Segment, Trajectory
from agentroll.trainer_clients import Group
from agentroll.trainer_clients.samples import samples

np = pytest.importorskip("numpy", reason="the adapters need numpy (dev extra)")
from agentroll.trainer_clients.adapters import (  # noqa: E402
    grpo_advantages,
    pad_batch,
    to_nemo_rl,
    to_openrlhf,
    to_verl,
)


def seg(start: int, end: int) -> Segment:
    return Segment(start=start, end=end, backend_id="b", policy_version=3, finish_reason="stop")


def chain(index: int, kind: str, prompt: list[int], sampled: list[int]) -> ChainTrace:
    """A one-call chain: `sampled` then one observation token."""
    return ChainTrace.model_validate(
        {
            "index": index,
            "kind": kind,
            "calls": [index],
            "prompt_ids": prompt,
            "response_ids": [*sampled, 99],
            "response_mask": [1] * len(sampled) + [0],
            "response_logprobs": [-0.5] * len(sampled) + [0.0],
            "segments": [seg(0, len(sampled))],
            "policy_versions": [3],
            "num_turns": 1,
        }
    )


def episode(job_id: str, reward: float, chains: list[ChainTrace] | None) -> Trajectory:
    return Trajectory(
        job_id=job_id,
        group_id="g",
        handler="harness",
        prompt_ids=[1, 2],
        response_ids=[5, 6, 7],
        response_mask=[1, 1, 1],
        response_logprobs=[-0.1, -0.2, -0.3],
        segments=[seg(0, 3)],
        policy_versions=[3],
        reward=reward,
        outcome="ok",
        status="completed",
        chains=chains,
    )


COMPACTED = episode(
    "g-s0", 1.0, [chain(0, "continuation", [1, 2, 3, 4], [8, 9]), chain(1, "side", [40], [41])]
)
PLAIN = episode("g-s1", 0.0, None)
GROUP = Group(group_id="g", n=2, valid=True, trajectories=[COMPACTED, PLAIN])


def test_the_default_is_the_main_chain_only_as_before() -> None:
    main = pad_batch([GROUP])
    without = pad_batch([COMPACTED.model_copy(update={"chains": None}), PLAIN])
    assert main.chain_kinds == ["main", "main"] and main.job_ids == ["g-s0", "g-s1"]
    for name in ("input_ids", "loss_mask", "old_logprobs", "rewards", "advantages"):
        assert np.array_equal(getattr(main, name), getattr(without, name)), name
    assert GROUP.samples() == [COMPACTED, PLAIN]


def test_all_chains_are_rows_with_their_own_tokens_and_their_episodes_reward() -> None:
    batch = pad_batch([GROUP], chains="all")
    assert batch.chain_kinds == ["main", "continuation", "side", "main"]
    assert batch.job_ids == ["g-s0", "g-s0/chain0", "g-s0/chain1", "g-s1"]
    assert batch.episode_ids == ["g-s0", "g-s0", "g-s0", "g-s1"]
    assert batch.group_ids == ["g"] * 4
    assert batch.rewards.tolist() == [1.0, 1.0, 1.0, 0.0]
    P = batch.prompt_len
    continuation = batch.input_ids[1]
    assert continuation[P - 4 : P].tolist() == [1, 2, 3, 4]
    assert continuation[P : P + 3].tolist() == [8, 9, 99]
    assert batch.response("loss_mask")[1].tolist() == [1, 1, 0]
    assert batch.response("loss_mask")[2].tolist() == [1, 0, 0]  # padded after [41, 99]
    assert batch.response("old_logprobs")[2].tolist()[:3] == [-0.5, 0.0, 0.0]
    assert batch.attention_mask[2].sum() == 1 + 2  # prompt [40], response [41, 99]
    # GRPO over episodes (1.0 and 0.0), each row carrying its episode's: three rows of the
    # rewarded episode do not pull the group's mean towards it.
    expected = grpo_advantages([1.0, 0.0], ["g", "g"])
    assert batch.advantages.tolist() == pytest.approx([expected[0]] * 3 + [expected[1]])


def test_a_trainer_can_pick_kinds_and_the_baseline_still_counts_every_episode() -> None:
    batch = pad_batch([GROUP], chains={"side"})
    assert batch.chain_kinds == ["side"] and batch.job_ids == ["g-s0/chain1"]
    assert batch.advantages.tolist() == pytest.approx([grpo_advantages([1.0, 0.0], ["g"] * 2)[0]])
    loop = pad_batch([GROUP], chains={"main", "continuation"})
    assert loop.chain_kinds == ["main", "continuation", "main"]
    with pytest.raises(ValueError, match="unknown chain kinds"):
        pad_batch([GROUP], chains={"summary"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'all' or a set"):
        pad_batch([GROUP], chains="main")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no token chain"):
        pad_batch([PLAIN], chains={"parallel"})


def test_group_samples_are_chain_views_linked_to_their_episode() -> None:
    views = GROUP.samples("all")
    assert [v.job_id for v in views] == ["g-s0", "g-s0/chain0", "g-s0/chain1", "g-s1"]
    side = views[2]
    assert side.metadata["chain"] == {"index": 1, "kind": "side", "episode": "g-s0"}
    assert (side.reward, side.group_id, side.chains, side.messages) == (1.0, "g", None, [])
    assert side.finish_reason == "stop"
    loose = COMPACTED.model_copy(update={"group_id": None})
    # An episode without a group is its own: its chains are in it.
    assert [v.group_id or v.job_id for v in samples(loose, "all")] == ["g-s0"] * 3


def test_verl_rows_carry_their_kind_and_openrlhf_refuses_uneven_groups() -> None:
    d = to_verl(pad_batch([GROUP], chains="all"))
    assert d["meta_info"]["chain_kinds"] == ["main", "continuation", "side", "main"]
    assert d["non_tensor_batch"]["uid"].tolist() == ["g"] * 4
    # The reward sits on each row's last sampled token.
    scores = d["batch"]["rm_scores"]
    assert scores[1].tolist()[:3] == [0.0, 1.0, 0.0] and scores[3].sum() == 0.0
    assert to_openrlhf(pad_batch([GROUP]))["rewards"].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="one row per episode"):
        to_openrlhf(pad_batch([GROUP], chains="all"))


def test_nemo_rl_rows_for_chains_split_each_chains_tokens_exactly() -> None:
    rows = to_nemo_rl([GROUP], chains="all")
    assert [r["extra_env_info"].get("chain_kind", "main") for r in rows] == [
        "main",
        "continuation",
        "side",
        "main",
    ]
    side = rows[2]
    assert side["extra_env_info"]["episode_id"] == "g-s0" and side["total_reward"] == 1.0
    tokens = np.concatenate([m["token_ids"] for m in side["message_log"]]).tolist()
    assert tokens == [40, 41, 99]
    assert [m["role"] for m in side["message_log"]] == ["user", "assistant", "environment"]
    assert "chain_kind" not in rows[0]["extra_env_info"]  # main rows exactly as before
