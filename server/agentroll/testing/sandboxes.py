"""agentroll's sandboxes seen from outside, as an operator would: their processes (found by
their marker) and the lease files of a runtime's state directory."""

import json
from pathlib import Path
from typing import Any

from agentroll.runtime import procs


def sandbox_pids(ids: set[str] | None = None) -> set[int]:
    """Processes of agentroll sandboxes on this machine (found by their marker): of the
    sandboxes named in `ids`, or of any when None."""
    return {p.pid for p in procs.scan() if p.sandbox_id and (ids is None or p.sandbox_id in ids)}


def leases(state_dir: Path) -> list[dict[str, Any]]:
    """The lease files of live sandboxes (owner, pid, pgid, label)."""
    folder = state_dir / "leases"
    if not folder.exists():
        return []
    found = []
    for path in folder.glob("*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # written or removed just now
    return found


def lease_ids(state_dir: Path) -> set[str]:
    return {lease["sandbox_id"] for lease in leases(state_dir)}
