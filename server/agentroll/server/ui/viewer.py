"""What the viewer's pages read: a result database, and the live server when there is one."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentroll.server.schema import StatusResponse
from agentroll.server.ui.source import ResultsReader

LiveStatus = Callable[[], StatusResponse]
"""The live server's `GET /v1/status` (`agentroll view` over a database has none)."""


@dataclass
class Viewer:
    reader: ResultsReader
    status: LiveStatus | None = None

    @classmethod
    def over(cls, db_path: Path, status: LiveStatus | None = None) -> "Viewer":
        return cls(ResultsReader(db_path), status)

    @property
    def live(self) -> bool:
        return self.status is not None
