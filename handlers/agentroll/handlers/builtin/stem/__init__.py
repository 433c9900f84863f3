"""The `stem` task family: multiple-choice science questions (`handler`), the chosen
letter read by `choices`."""

from agentroll.handlers.builtin.stem.handler import (
    StemHandler,
    StemInstance,
    StemTask,
    load_stem_tasks,
)

HANDLERS = {"stem": "StemHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["StemHandler", "StemInstance", "StemTask", "load_stem_tasks"]
