"""Trajectories -> the formats other tools read (no extra dependencies).

- `to_atif`: Harbor's Agent Trajectory Interchange Format (what `harbor view` shows), with
  the exact token ids, logprobs and loss mask of every generation turn in its step metrics.

Field mapping: docs/trainers_out.md.
"""

from agentroll.trainer_clients.exports.atif import ATIF_VERSION, to_atif

__all__ = ["ATIF_VERSION", "to_atif"]
