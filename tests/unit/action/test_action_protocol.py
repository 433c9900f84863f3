"""Framing and result decoding shared by the action server and client."""

import pytest

from agentroll.runtime.action import protocol
from agentroll.runtime.action.errors import ActionProtocolError
from agentroll.runtime.action.protocol import BashResult, EditorResult, PythonResult


def test_frame_round_trip_keeps_unicode_and_nesting() -> None:
    message = {"id": 3, "op": "bash", "args": {"command": "echo héllo ✓ \x00 'q'", "n": [1, 2]}}
    frame = protocol.encode_frame(message)
    length = protocol.frame_length(frame[:4])
    assert length == len(frame) - 4
    assert protocol.decode_body(frame[4:]) == message


def test_oversized_frame_is_refused_on_both_sides() -> None:
    header = protocol.HEADER.pack(protocol.MAX_FRAME_BYTES + 1)
    with pytest.raises(ActionProtocolError, match="exceeds"):
        protocol.frame_length(header)
    with pytest.raises(ActionProtocolError, match="exceeds"):
        protocol.encode_frame({"data": "x" * (protocol.MAX_FRAME_BYTES + 1)})


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_malformed_bodies_raise_protocol_errors(body: bytes) -> None:
    with pytest.raises(ActionProtocolError):
        protocol.decode_body(body)


def test_results_decode_from_wire_dicts() -> None:
    bash = BashResult.from_wire(
        {"output": "x", "exit_code": None, "timed_out": True, "truncated": False, "duration_s": 1}
    )
    assert bash.exit_code is None and bash.timed_out and not bash.session_restarted
    py = PythonResult.from_wire(
        {"output": "", "error": "Traceback", "timed_out": False, "truncated": False}
    )
    assert py.error == "Traceback" and not py.kernel_restarted
    assert EditorResult.from_wire({"output": "done", "ok": True}) == EditorResult("done", True)
    with pytest.raises(AttributeError):
        bash.output = "changed"  # type: ignore[misc]
