"""Shared bits of the benchmark programs: process CPU/memory readings and reporting."""

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its reaped children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE


def report(name: str, value: float, unit: str, target: str, ok: bool) -> None:
    verdict = "meets target" if ok else "MISSES target"
    print(f"  {name:<38} {value:>12.2f} {unit:<10} target {target:<14} {verdict}")
