"""The scripted MoE model's expert routing, as vLLM returns it with
`--enable-return-routed-experts`.

Each token the engine reads is routed, in every layer, to `top_k` distinct experts, chosen
from (position, token id, layer) alone: as in a real model, the routing of a prefix does not
change when more tokens follow, so a later turn's rows agree with an earlier one's.
"""

import base64
import struct
import sys
from array import array

from agentroll.testing.scripted_llm.config import MoERouting

NPY_MAGIC = b"\x93NUMPY"

_MIX = 0x9E3779B1  # Knuth's multiplicative hash


def experts_at(position: int, token_id: int, layer: int, moe: MoERouting) -> list[int]:
    """The `top_k` experts token `token_id` at `position` is routed to in `layer`."""
    key = (position * 1_000_003 + token_id * 7919 + layer * 104_729 + 1) & 0xFFFFFFFF

    def score(expert: int) -> int:
        return ((key ^ (expert * _MIX)) * _MIX) & 0xFFFFFFFF

    return sorted(range(moe.num_experts), key=score)[: moe.top_k]


def routing_rows(ids: list[int], start: int, moe: MoERouting) -> list[list[list[int]]]:
    """Rows for positions `start` .. len(ids) - 2 of the sequence (prompt + sampled ids): the
    last sampled token is never read back, so it has none."""
    return [
        [experts_at(pos, ids[pos], layer, moe) for layer in range(moe.num_layers)]
        for pos in range(start, len(ids) - 1)
    ]


def encode_npy(rows: list[list[list[int]]], layers: int, top_k: int) -> str:
    """The `.npy` answer vLLM gives for `rows` (uint8 where every id fits, else uint16)."""
    flat = array("H", [e for row in rows for layer in row for e in layer])
    narrow = not flat or max(flat) < 256
    data = array("B", flat) if narrow else flat
    if sys.byteorder == "big":
        data.byteswap()
    descr = "|u1" if narrow else "<u2"
    shape = f"({len(rows)}, {layers}, {top_k})"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # the header ends 64-byte aligned
    blob = NPY_MAGIC + b"\x01\x00" + struct.pack("<H", len(header)) + header.encode()
    blob += data.tobytes()
    return base64.b64encode(blob).decode("ascii")


def routed_experts_field(ids: list[int], start: int, moe: MoERouting | None) -> str | None:
    """A completion choice's `routed_experts`: base64 `.npy`, or null for a dense model."""
    if moe is None:
        return None
    return encode_npy(routing_rows(ids, start, moe), moe.num_layers, moe.top_k)
