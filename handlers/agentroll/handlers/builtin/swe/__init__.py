"""The `swe` task family: repair a repository so its graded tests pass (`handler`), with
its grading (`swe_infra`, `swe_pytest`, `swe_log`, `swe_shadow`, `swe_mirror`, `swe_repo`)
and dataset rows (`swe_datasets`, `swe_official`)."""

from agentroll.handlers.builtin.swe.handler import SweHandler, SweInstance, SweTask, load_swe_tasks

HANDLERS = {"swe": "SweHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["SweHandler", "SweInstance", "SweTask", "load_swe_tasks"]
