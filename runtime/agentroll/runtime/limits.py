"""Command prefixes that apply ``Limits`` and join a sandbox's cgroup."""

from __future__ import annotations

from pathlib import Path

from agentroll.runtime.base import Limits


def prlimit_argv(limits: Limits, prlimit: str = "prlimit") -> list[str]:
    """``prlimit --nproc=.. --as=.. -- `` (util-linux); empty when no limit is set."""
    opts = []
    if limits.max_processes is not None:
        opts.append(f"--nproc={limits.max_processes}")
    if limits.max_memory_bytes is not None:
        opts.append(f"--as={limits.max_memory_bytes}")
    if limits.max_file_size_bytes is not None:
        opts.append(f"--fsize={limits.max_file_size_bytes}")
    if limits.cpu_time_s is not None:
        opts.append(f"--cpu={limits.cpu_time_s}")
    if limits.max_open_files is not None:
        opts.append(f"--nofile={limits.max_open_files}")
    return [prlimit, *opts, "--"] if opts else []


def join_cgroup_argv(procs_file: Path | None) -> list[str]:
    """Prefix that moves the process into a cgroup before it execs (so children inherit it)."""
    if procs_file is None:
        return []
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs_file)]
