"""The life of a job, in one package: admitted, run through the stages, committed once.

`service.JobService` keeps the table of live jobs and is the single committer; `pipeline`
runs INIT -> ready -> RUN -> EVAL under the stage limits and returns a `Verdict`;
`rollout.Rollout` owns one job's record, context and handler, runs the stages and builds
the job's `Trajectory` from what it recorded; `context.JobContext` is what the handler sees
(its sandboxes, proxies, sessions), `usage` what they cost. Nothing here imports the modules that
use it (routes, status, metrics, recovery, weight sync): they import this package's surface.
"""

from agentroll.server.jobs.context import JobContext
from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Pipeline, Verdict
from agentroll.server.jobs.results import unrun_trajectory
from agentroll.server.jobs.rollout import Rollout
from agentroll.server.jobs.service import JobService

__all__ = [
    "JobContext",
    "JobService",
    "LiveJob",
    "Pipeline",
    "Rollout",
    "Verdict",
    "unrun_trajectory",
]
