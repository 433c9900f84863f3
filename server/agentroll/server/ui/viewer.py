"""What the viewer's pages read: a result database, and the live server when there is one."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentroll.server.ui.source import ResultsReader

if TYPE_CHECKING:  # the live server's service; `agentroll view` has none
    from agentroll.server.jobs import JobService


@dataclass
class Viewer:
    reader: ResultsReader
    service: "JobService | None" = None

    @classmethod
    def over(cls, db_path: Path, service: "JobService | None" = None) -> "Viewer":
        return cls(ResultsReader(db_path), service)

    @property
    def live(self) -> bool:
        return self.service is not None
