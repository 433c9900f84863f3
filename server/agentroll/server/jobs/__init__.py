"""The life of a job, in one package: admitted, run through the stages, committed once.

`service.JobService` keeps the table of live jobs and is the single committer; `pipeline`
runs INIT -> ready -> RUN -> EVAL under the stage limits and returns a `Verdict`;
`context.JobContext` is what the job's handler sees (its sandboxes, proxies, sessions);
`results` turns a finished job into its `Trajectory`. Nothing here imports the modules that
use it (routes, status, metrics, recovery, weight sync): they import this package's surface.
"""

from agentroll.server.jobs.context import JobContext
from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Pipeline, Verdict
from agentroll.server.jobs.results import STATUS_BY_OUTCOME, build_trajectory
from agentroll.server.jobs.service import JobService

__all__ = [
    "STATUS_BY_OUTCOME",
    "JobContext",
    "JobService",
    "LiveJob",
    "Pipeline",
    "Verdict",
    "build_trajectory",
]
