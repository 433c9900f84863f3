"""Wire format shared by the action server and its client.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. Requests carry
an integer ``id`` so several calls can be in flight on one connection; replies echo it::

    request:  {"id": 7, "op": "bash", "args": {"command": "ls", "timeout": 30}}
    reply:    {"id": 7, "result": {...}}
    failure:  {"id": 7, "error": {"type": "bad_request", "message": "..."}}

Error ``type`` values are stable strings (never class paths): ``bad_request`` (the caller's
fault), ``internal`` (the server's), ``frame_too_large`` and ``protocol`` (the connection is
closed after these). Binary payloads (upload/download) travel base64-encoded.

Kept free of third-party imports: the server imports it on its ready path.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from agentroll.runtime.action.errors import ActionProtocolError

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">I")
# Large enough for a base64-encoded MAX_TRANSFER_BYTES file plus envelope.
MAX_FRAME_BYTES = 48 * 1024 * 1024
MAX_TRANSFER_BYTES = 32 * 1024 * 1024

OPS = (
    "alive",
    "bash",
    "bash_interrupt",
    "download",
    "editor",
    "orphans",
    "python",
    "python_interrupt",
    "shutdown",
    "stop_agent",
    "upload",
    "warm",
)
WARM_TOOLS = ("bash", "python")
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

# Error types on the wire.
BAD_REQUEST = "bad_request"
INTERNAL = "internal"
FRAME_TOO_LARGE = "frame_too_large"
PROTOCOL = "protocol"


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialise one message; refuse to build a frame the peer would reject."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", errors="surrogatepass"
    )
    if len(body) > MAX_FRAME_BYTES:
        raise ActionProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES} bytes")
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """Length announced by a 4-byte header, checked against the bound."""
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ActionProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES} bytes")
    return int(length)


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body into a JSON object."""
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ActionProtocolError(f"frame is not valid JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ActionProtocolError("frame must hold a JSON object")
    return message


@dataclass(frozen=True, slots=True)
class BashResult:
    """Outcome of one bash command.

    ``exit_code`` is None when the command did not finish on its own (timed out, interrupted,
    or killed the shell with a signal). ``session_restarted`` means the shell was replaced, so
    working directory, variables and functions were reset.
    """

    output: str
    exit_code: int | None
    timed_out: bool
    truncated: bool
    duration_s: float
    interrupted: bool = False
    session_restarted: bool = False

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> BashResult:
        return cls(
            output=str(data["output"]),
            exit_code=None if data["exit_code"] is None else int(data["exit_code"]),
            timed_out=bool(data["timed_out"]),
            truncated=bool(data["truncated"]),
            duration_s=float(data["duration_s"]),
            interrupted=bool(data.get("interrupted", False)),
            session_restarted=bool(data.get("session_restarted", False)),
        )


@dataclass(frozen=True, slots=True)
class PythonResult:
    """Outcome of one IPython execution.

    ``output`` holds stdout, stderr and text of results/displays in arrival order; ``error``
    the traceback text when the code raised. ``kernel_restarted`` means variables were lost.
    """

    output: str
    error: str | None
    timed_out: bool
    truncated: bool
    duration_s: float = 0.0
    interrupted: bool = False
    kernel_restarted: bool = False

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PythonResult:
        return cls(
            output=str(data["output"]),
            error=None if data["error"] is None else str(data["error"]),
            timed_out=bool(data["timed_out"]),
            truncated=bool(data["truncated"]),
            duration_s=float(data.get("duration_s", 0.0)),
            interrupted=bool(data.get("interrupted", False)),
            kernel_restarted=bool(data.get("kernel_restarted", False)),
        )


@dataclass(frozen=True, slots=True)
class EditorResult:
    """Outcome of one file-editor command; ``ok`` is False for a refused or failed edit."""

    output: str
    ok: bool

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> EditorResult:
        return cls(output=str(data["output"]), ok=bool(data["ok"]))
