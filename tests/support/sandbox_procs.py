"""Sandbox processes by the runtime that started them.

A leak check that counts every sandbox on the node fails whenever another test, or another
server on a shared node, starts one meanwhile. These count only one runtime's: each sandbox
process carries its runtime's owner marker (`AGENTROLL_OWNER`) beside its sandbox id.
"""

import contextlib

from agentroll.runtime import procs
from agentroll.runtime.base import OWNER_ENV


def _owner(pid: int) -> str | None:
    prefix = f"{OWNER_ENV}=".encode()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as environ:
        for entry in environ.read().split(b"\0"):
            if entry.startswith(prefix):
                return entry[len(prefix) :].decode(errors="replace")
    return None


def owned_sandbox_processes(owner: str) -> dict[int, str]:
    """pid -> sandbox id, for every live sandbox process the runtime `owner` started."""
    return {p.pid: p.sandbox_id for p in procs.scan() if p.sandbox_id and _owner(p.pid) == owner}
