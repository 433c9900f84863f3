"""The servers of a pool: where their URLs come from, what the pool knows of each, failovers."""

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from agentroll.server.schema import JobRequest
from agentroll.trainer_clients.client import AsyncRolloutClient


def read_server_list(path: str | Path) -> list[str]:
    """Server URLs from a file, one per line (blank lines and `#` comments skipped)."""
    urls: list[str] = []
    for line in Path(path).read_text().splitlines():
        url = line.split("#", 1)[0].strip().rstrip("/")
        if url and url not in urls:
            urls.append(url)
    if not urls:
        raise ValueError(f"no server URL in {path}")
    return urls


@dataclass
class Failover:
    """One server declared dead: when it was noticed and when its jobs were placed again."""

    url: str
    noticed_at: float
    jobs: int
    resubmitted_at: float | None = None

    @property
    def resubmit_s(self) -> float | None:
        """Seconds from noticing the death to placing its jobs again (None: not yet)."""
        return None if self.resubmitted_at is None else self.resubmitted_at - self.noticed_at


@dataclass(eq=False)
class Member:
    url: str
    client: AsyncRolloutClient
    owned: bool
    alive: bool = True
    jobs: dict[str, JobRequest] = field(default_factory=dict)
    """Jobs this pool placed here whose results it has not seen yet."""
    capacity: int = 1
    external: int = 0
    cursor: int = 0
    follower: "asyncio.Task[None] | None" = None
    failing_since: float | None = None
    """When its health route started failing (None: it answers)."""
    moved: set[str] = field(default_factory=set)
    """Job ids placed elsewhere that may still run here: cancelled once it answers."""

    @property
    def load(self) -> float:
        return (len(self.jobs) + self.external) / max(self.capacity, 1)
