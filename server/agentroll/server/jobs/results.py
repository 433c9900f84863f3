"""Turning a finished rollout into its `agentroll.trajectory.v1` record."""

import time
from typing import Any

from agentroll.server.jobs.context import JobContext
from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Verdict
from agentroll.server.recorded import logprobs_info
from agentroll.server.schema import ErrorInfo, JobState, Outcome, Trajectory

STATUS_BY_OUTCOME = {
    Outcome.ok: JobState.completed,
    Outcome.agent_error: JobState.completed,
    Outcome.infra_error: JobState.failed,
    Outcome.cancelled: JobState.cancelled,
    Outcome.timed_out: JobState.timed_out,
}
SCORED_OUTCOMES = frozenset({Outcome.ok, Outcome.agent_error})
"""Outcomes whose reward means something (it may be 0); the others carry none."""


def build_trajectory(
    job: LiveJob, ctx: JobContext | None, verdict: Verdict, extra: dict[str, Any]
) -> Trajectory:
    """`ctx` is None when the job failed before its context existed (e.g. at recovery)."""
    request = job.request
    timing = job.timing.model_copy()
    timing.total_s = time.monotonic() - job.started
    fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {**request.metadata, **extra.get("metadata", {})}
    if ctx is not None:
        metadata.update(ctx.proxy_metadata())
        llm = ctx.recorded_llm()
        sessions = [llm, *ctx.agents.sessions()]
        timing.llm_s = sum(s.llm_s for s in sessions)
        timing.llm_calls = sum(s.llm_calls for s in sessions)
        timing.sandbox_start_s = ctx.sandbox_start_s
        timing.tool_s, timing.tool_calls = ctx.tool_s, sum(ctx.tool_calls.values())
        timing.tool_startup_s = ctx.tool_startup_s
        if ctx.tool_calls:
            metadata["tool_calls"] = dict(ctx.tool_calls)
        segments = llm.segments
        fields = {
            "prompt_ids": llm.prompt_ids,
            "response_ids": llm.response_ids,
            "response_mask": llm.response_mask,
            "response_logprobs": llm.response_logprobs,
            "segments": segments,
            "policy_versions": sorted({s.policy_version for s in segments}),
            "num_turns": llm.num_turns,
            "messages": list(llm.messages),
            "tools": llm.tools,
            "finish_reason": ctx.finish_reason
            or (segments[-1].finish_reason if segments else None),
            "logprobs": logprobs_info(segments, request.sampling.model_dump()),
            "routed_experts": llm.routed_experts,
            "chains": ctx.recorded_chains(request.sampling.model_dump()),
        }
        if llm.retries:
            metadata["llm_retries"] = llm.retries
        if ctx.llm.mixed_version_segments:
            # Parked across a `keep` weight update by a backend that does not say where the
            # update fell (before vLLM 0.33): those segments carry the version they started with.
            metadata["mixed_version_segments"] = ctx.llm.mixed_version_segments
    error = None
    if verdict.error_type is not None:
        error = ErrorInfo(
            type=verdict.error_type,
            message=verdict.error_message or "",
            stage=verdict.error_stage,
        )
    reward = verdict.reward if verdict.outcome in SCORED_OUTCOMES else None
    if ctx is not None and ctx.agents:
        fields["agents"] = ctx.agents.traces(None if reward is None else reward.agents)
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
        artifacts=extra.get("artifacts", {}),
        metadata=metadata,
        **fields,
    )
