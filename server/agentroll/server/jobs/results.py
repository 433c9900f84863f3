"""The `agentroll.trajectory.v1` record of a finished job: its outcome tables, and the record
of a job that never ran (recovery, a rejected result). A job that ran builds its own from what
it recorded (`Rollout.trajectory`)."""

import time
from typing import Any

from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Verdict
from agentroll.server.schema import ErrorInfo, JobState, Outcome, Timing, Trajectory

STATUS_BY_OUTCOME = {
    Outcome.ok: JobState.completed,
    Outcome.agent_error: JobState.completed,
    Outcome.infra_error: JobState.failed,
    Outcome.cancelled: JobState.cancelled,
    Outcome.timed_out: JobState.timed_out,
}
SCORED_OUTCOMES = frozenset({Outcome.ok, Outcome.agent_error})
"""Outcomes whose reward means something (it may be 0); the others carry none."""


def job_timing(job: LiveJob) -> Timing:
    """A copy of the job's stage timing, its total measured now."""
    timing = job.timing.model_copy()
    timing.total_s = time.monotonic() - job.started
    return timing


def trajectory_record(
    job: LiveJob,
    verdict: Verdict,
    *,
    timing: Timing,
    metadata: dict[str, Any],
    artifacts: dict[str, Any],
    **fields: Any,
) -> Trajectory:
    """The record: the job's identity, the verdict's outcome, reward and error, and `fields`
    (the token fields of a job that ran)."""
    request = job.request
    error = None
    if verdict.error_type is not None:
        error = ErrorInfo(
            type=verdict.error_type,
            message=verdict.error_message or "",
            stage=verdict.error_stage,
        )
    reward = verdict.reward if verdict.outcome in SCORED_OUTCOMES else None
    return Trajectory(
        job_id=job.job_id,
        group_id=request.group_id,
        handler=request.handler,
        reward=None if reward is None else reward.value,
        reward_info={} if reward is None else reward.info,
        reward_components=None if reward is None else dict(reward.components) or None,
        outcome=verdict.outcome,
        status=STATUS_BY_OUTCOME[verdict.outcome].value,
        timing=timing,
        error=error,
        artifacts=artifacts,
        metadata=metadata,
        **fields,
    )


def unrun_trajectory(job: LiveJob, verdict: Verdict) -> Trajectory:
    """The record of a job with no rollout to read (failed at recovery, or its own record
    could not be built or stored): the request's metadata, the job's timing, no tokens."""
    metadata = dict(job.request.metadata)
    return trajectory_record(job, verdict, timing=job_timing(job), metadata=metadata, artifacts={})
