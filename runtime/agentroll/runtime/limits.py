"""How ``Limits`` reach processes: rlimits for the action server's tools and for exec, cgroups.

The action server itself runs without the sandbox's rlimits: it applies them to the agent's
tools (``--rlimit NAME=VALUE``), so a CPU-time or process limit the agent exhausts never ends
the server. Commands run through ``Sandbox.exec`` get them from ``prlimit`` (util-linux).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentroll.runtime.base import Limits


def rlimits(limits: Limits) -> list[tuple[str, int]]:
    """``(name, value)`` per set limit; names are prlimit's long options without dashes."""
    pairs = [
        ("nproc", limits.max_processes),
        ("as", limits.max_memory_bytes),
        ("fsize", limits.max_file_size_bytes),
        ("cpu", limits.cpu_time_s),
        ("nofile", limits.max_open_files),
    ]
    return [(name, value) for name, value in pairs if value is not None]


def prlimit_argv(limits: Limits, prlimit: str = "prlimit") -> list[str]:
    """``prlimit --nproc=.. --as=.. --``; empty when no limit is set."""
    opts = [f"--{name}={value}" for name, value in rlimits(limits)]
    return [prlimit, *opts, "--"] if opts else []


def rlimit_args(limits: Limits) -> list[str]:
    """The action server's options that make it apply ``limits`` to the agent's tools."""
    return [arg for name, value in rlimits(limits) for arg in ("--rlimit", f"{name}={value}")]


def join_cgroup_argv(procs_files: Sequence[Path]) -> list[str]:
    """Prefix that moves the process into cgroups before it execs (so children inherit them)."""
    if not procs_files:
        return []
    script = 'for f in "$0" "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; '
    script += 'while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
    first, *rest = (str(p) for p in procs_files)
    return ["/bin/sh", "-c", script, first, *rest, "--"]
