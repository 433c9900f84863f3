"""MoE routed experts: vLLM's `.npy` answer read without numpy, and the trajectory's encoding."""

import base64
import io

import pytest

from agentroll.server.llm.routed import RoutingLog, decode_npy
from agentroll.server.schema import LogprobsInfo, RoutedExperts, Segment, Trajectory
from agentroll.testing.scripted_llm.config import MoERouting
from agentroll.testing.scripted_llm.routing import routed_experts_field, routing_rows

np = pytest.importorskip("numpy", reason="numpy writes the reference .npy files")


def _npy(array: object) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32"])
def test_every_dtype_vllm_may_send_is_read_exactly(dtype: str) -> None:
    values = (np.arange(5 * 3 * 2).reshape(5, 3, 2) * 37 % 251).astype(dtype)
    routing = decode_npy(_npy(values))
    assert (routing.rows, routing.num_layers, routing.top_k) == (5, 3, 2)
    assert routing.experts.tolist() == values.ravel().tolist()


@pytest.mark.parametrize(
    ("blob", "error"),
    [
        ("not base64!", "not base64"),
        (base64.b64encode(b"PK\x03\x04 a zip file").decode(), "not a .npy"),
        (base64.b64encode(b"\x93NUMPY\x01").decode(), "not a .npy"),  # cut short
        (base64.b64encode(b"\x93NUMPY\x01\x00\x04\x00[1]\n").decode(), "header"),
        (_npy(np.zeros((4, 2), dtype="uint8")), "shape"),  # 2-d: no top-k axis
        (_npy(np.zeros((2, 2, 2), dtype="float32")), "'<f4'"),  # not expert ids
        (_npy(np.full((1, 1, 2), -1, dtype="int32")), "routed_experts"),  # negative id
    ],
)
def test_what_is_not_routing_is_refused_not_replayed(blob: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        decode_npy(blob)


def test_the_doubles_answer_is_what_numpy_reads_back() -> None:
    moe = MoERouting(num_layers=2, num_experts=300, top_k=3)
    ids = [5, 9, 2, 7, 1]
    encoded = routed_experts_field(ids, 1, moe)
    assert encoded is not None
    array = np.load(io.BytesIO(base64.b64decode(encoded)))
    assert array.dtype == np.uint16 and array.shape == (3, 2, 3)  # positions 1..3
    assert array.tolist() == routing_rows(ids, 1, moe)
    assert all(len(set(layer)) == 3 for row in array.tolist() for layer in row)  # distinct
    small = MoERouting(num_layers=1, num_experts=8, top_k=2)
    assert np.load(io.BytesIO(base64.b64decode(routed_experts_field(ids, 0, small) or ""))).dtype
    assert routed_experts_field(ids, 0, None) is None  # a dense model answers null


def test_turns_add_up_and_one_turn_without_routing_loses_it_whole() -> None:
    log = RoutingLog()
    log.add(decode_npy(_npy(np.ones((4, 2, 1), dtype="uint8"))))
    log.add(decode_npy(_npy(np.full((3, 2, 1), 300, dtype="uint16"))))
    encoded = log.encoded()
    assert encoded is not None and (encoded.positions, encoded.dtype) == (7, "uint16")
    flat = np.frombuffer(base64.b64decode(encoded.data), dtype="<u2").tolist()
    assert flat == [1] * 8 + [300] * 6
    log.add(None)  # a turn served by a backend without capture
    assert log.encoded() is None
    reshaped = RoutingLog()
    reshaped.add(decode_npy(_npy(np.ones((1, 2, 1), dtype="uint8"))))
    reshaped.add(decode_npy(_npy(np.ones((1, 3, 1), dtype="uint8"))))  # another model
    assert reshaped.encoded() is None


def _trajectory(**fields: object) -> Trajectory:
    base: dict[str, object] = {
        "job_id": "j",
        "handler": "h",
        "prompt_ids": [1, 2],
        "response_ids": [3, 4],
        "response_mask": [1, 1],
        "response_logprobs": [-0.1, -0.2],
        "reward": 1.0,
        "outcome": "ok",
        "status": "completed",
    }
    return Trajectory.model_validate({**base, **fields})


def test_the_schema_refuses_routing_and_declarations_that_do_not_fit() -> None:
    three = base64.b64encode(bytes(3)).decode()
    with pytest.raises(ValueError, match="not 4 bytes"):
        RoutedExperts(num_layers=2, top_k=2, positions=1, dtype="uint8", data=three)
    with pytest.raises(ValueError, match="covers 4 positions of 4"):
        _trajectory(
            routed_experts=RoutedExperts(
                num_layers=1, top_k=1, positions=4, dtype="uint8", data="AAAAAA=="
            )
        )
    segment = Segment(
        start=0, end=2, backend_id="b", policy_version=0, finish_reason="stop",
        logprobs_mode="raw_logprobs",
    )  # fmt: skip
    with pytest.raises(ValueError, match="not the declared processed_logprobs"):
        _trajectory(segments=[segment], logprobs=LogprobsInfo(mode="processed_logprobs"))
    ok = _trajectory(
        segments=[segment],
        logprobs=LogprobsInfo(mode="raw_logprobs", temperature=0.7),
        routed_experts=RoutedExperts(
            num_layers=1, top_k=1, positions=3, dtype="uint8", data="AAAA"
        ),
    )
    assert Trajectory.model_validate_json(ok.model_dump_json()) == ok
