"""MoE routed experts: vLLM's wire encoding in, the trajectory's compact encoding out.

vLLM (`--enable-return-routed-experts`) answers each completion choice with
`routed_experts`: base64 of a `.npy` file, shape `(rows, num_layers, top_k)`, one row per
token the engine read from `routed_experts_prompt_start` on (prompt, then every sampled token
but the last, which was never read back). The server has no numpy, so the `.npy` header is
parsed here (format 1.0-3.0: magic, version, header length, a Python-literal dict).
"""

import ast
import base64
import binascii
import struct
import sys
from array import array
from dataclasses import dataclass

from agentroll.server.schema import RoutedExperts

NPY_MAGIC = b"\x93NUMPY"
# npy dtype descriptors vLLM uses (the narrowest that holds every expert id) -> array typecode
_TYPECODES = {"|u1": "B", "<u2": "H", "<i2": "h", "<u4": "I", "<i4": "i", "<i8": "q"}


@dataclass(frozen=True, slots=True)
class Routing:
    """Routed expert ids, flat in row-major `(rows, num_layers, top_k)` order."""

    rows: int
    num_layers: int
    top_k: int
    experts: array  # typecode "H": expert ids fit 16 bits in every MoE model served today


def decode_npy(encoded: str) -> Routing:
    """vLLM's base64 `.npy` answer; `ValueError` when it is not a 3-d integer array."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"routed_experts is not base64: {exc}") from exc
    if raw[:6] != NPY_MAGIC or len(raw) < 12:
        raise ValueError("routed_experts is not a .npy array")
    major = raw[6]
    if major == 1:
        (header_len,), start = struct.unpack_from("<H", raw, 8), 10
    else:
        (header_len,), start = struct.unpack_from("<I", raw, 8), 12
    try:
        header = ast.literal_eval(raw[start : start + header_len].decode("latin-1"))
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"unreadable .npy header: {exc}") from exc
    if not isinstance(header, dict):
        raise ValueError(f"unreadable .npy header: {header!r}"[:200])
    shape, descr = header.get("shape"), header.get("descr")
    if (
        header.get("fortran_order")
        or descr not in _TYPECODES
        or not isinstance(shape, tuple)
        or len(shape) != 3
    ):
        raise ValueError(f"routed_experts: unexpected array {descr!r} of shape {shape!r}")
    values = array(_TYPECODES[descr])
    values.frombytes(raw[start + header_len :])
    if sys.byteorder == "big":
        values.byteswap()
    rows, layers, top_k = (int(n) for n in shape)
    if len(values) != rows * layers * top_k:
        raise ValueError(f"routed_experts: {len(values)} values do not fill shape {shape}")
    try:
        return Routing(rows, layers, top_k, array("H", values))
    except OverflowError as exc:  # a negative or > 16-bit id is no expert
        raise ValueError(f"routed_experts: {exc}") from exc


class RoutingLog:
    """A trajectory's routing, turn by turn. `covered` is how many of its positions are
    known: the next turn asks the engine for rows from there (`routed_experts_prompt_start`).
    One turn without routing (a backend without capture) loses it for the whole trajectory."""

    def __init__(self) -> None:
        self.covered = 0
        self.lost = False
        self._shape: tuple[int, int] | None = None
        self._experts = array("H")

    def add(self, routing: Routing | None) -> None:
        if routing is None or self.lost:
            self.lost = True
            return
        shape = (routing.num_layers, routing.top_k)
        if self._shape not in (None, shape):
            self.lost = True  # turns from models of different shape: no single replay exists
            return
        self._shape = shape
        self._experts.extend(routing.experts)
        self.covered += routing.rows

    def encoded(self) -> RoutedExperts | None:
        """The compact encoding of the `covered` rows; None where a turn had no routing."""
        if self.lost or self._shape is None:
            return None
        narrow = not self._experts or max(self._experts) < 256
        data = array("B", self._experts) if narrow else array("H", self._experts)
        if sys.byteorder == "big":
            data.byteswap()
        return RoutedExperts(
            num_layers=self._shape[0],
            top_k=self._shape[1],
            positions=self.covered,
            dtype="uint8" if narrow else "uint16",
            data=base64.b64encode(data.tobytes()).decode("ascii"),
        )
