"""`Rollout`: one job's live record, the context its handler sees, and the handler.

It runs the stages (through the shared `Pipeline`), concludes the handler's work and builds
its own trajectory from what it recorded: the record's stage timing, the context's usage, and
the token sessions (or the harness proxy's main chain). The service owns the asyncio task
around it and commits what it returns.
"""

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from agentroll.handlers import AgentHandler
from agentroll.server.jobs.agents import JobAgent, JobAgents
from agentroll.server.jobs.context import JobContext
from agentroll.server.jobs.live import LiveJob
from agentroll.server.jobs.pipeline import Pipeline, Verdict
from agentroll.server.jobs.results import (
    SCORED_OUTCOMES,
    job_timing,
    trajectory_record,
    unrun_trajectory,
)
from agentroll.server.jobs.usage import RolloutUsage
from agentroll.server.llm import TokenSession
from agentroll.server.recorded import logprobs_info
from agentroll.server.schema import DEFAULT_POLICY, JobRequest, Outcome, Trajectory
from agentroll.server.state import ServerState

log = logging.getLogger("agentroll.server")
TEMPLATE_CHECK_TIMEOUT_S = 10.0


@dataclass(eq=False)
class Rollout:
    record: LiveJob
    handler: AgentHandler
    context: JobContext

    @classmethod
    def open(cls, record: LiveJob, state: ServerState) -> "Rollout":
        """The rollout of `record`: its handler, and a context with a token session per
        policy it samples from, on the server's backends, runtime and judges."""
        request = record.request
        agents = {
            name: JobAgent(name, spec.policy, spec.trainable, _session(state, request, spec.policy))
            for name, spec in (request.agents or {}).items()
        }
        context = JobContext(
            job_id=record.job_id,
            instance=state.registry.task_instance(request),
            limits=request.limits,
            metadata=request.metadata,
            llm=_session(state, request, DEFAULT_POLICY),
            agents=JobAgents(agents),
            deadline=record.started + request.limits.deadline_s,
            agent_clock=record.agent_seconds,
            runtime=state.runtime,
            usage=RolloutUsage(state.metrics),
            teardowns=state.teardowns,
            proxy_caps=state.settings.llm_proxy,
            judges=state.judges,
        )
        return cls(record, state.registry.for_job(request), context)

    @property
    def job_id(self) -> str:
        return self.record.job_id

    async def run(self, pipeline: Pipeline) -> Verdict:
        """INIT -> RUN -> EVAL under the job's deadline; cancellation propagates."""
        return await pipeline.execute(self.record, self.handler, self.context)

    async def conclude(self, verdict: Verdict, *, measure_divergence: bool) -> Trajectory:
        """The trajectory of the finished job. A failure here is the server's: the result
        is then `infra_error` (never a reward the rollout did not earn), and never missing."""
        extra: dict[str, Any] = {}
        try:
            extra = self.handler.final_result(self.context)
        except Exception as exc:
            log.exception(
                "final_result of %s failed for job %s", self.record.request.handler, self.job_id
            )
            if verdict.outcome in SCORED_OUTCOMES:
                verdict = Verdict(Outcome.infra_error, None, "final_result_failed", repr(exc))
        if measure_divergence and verdict.outcome in SCORED_OUTCOMES:
            divergence = await self._template_divergence()
            if divergence is not None:
                extra.setdefault("metadata", {})["template_divergence"] = divergence
        try:
            return self.trajectory(verdict, extra)
        except Exception as exc:
            log.exception("could not build the trajectory of job %s", self.job_id)
            failed = Verdict(Outcome.infra_error, None, "trajectory_failed", repr(exc))
            return unrun_trajectory(self.record, failed)

    async def _template_divergence(self) -> int | None:
        """Diagnostics only: bounded, and a failure to measure never fails the rollout."""
        if self.context.llm.num_turns < 2:
            return None
        try:
            async with asyncio.timeout(TEMPLATE_CHECK_TIMEOUT_S):
                return await self.context.llm.template_divergence()
        except Exception as exc:
            log.warning("could not measure template divergence: %r", exc)
            return None

    def trajectory(self, verdict: Verdict, extra: dict[str, Any]) -> Trajectory:
        """The record of what this rollout recorded, under `verdict`; `extra` is the
        handler's `final_result` (artifacts, metadata)."""
        ctx, request = self.context, self.record.request
        timing = job_timing(self.record)
        metadata: dict[str, Any] = {**request.metadata, **extra.get("metadata", {})}
        metadata.update(ctx.proxy_metadata())
        llm = ctx.recorded_llm()
        sessions = [llm, *ctx.agents.sessions()]
        timing.llm_s = sum(s.llm_s for s in sessions)
        timing.llm_calls = sum(s.llm_calls for s in sessions)
        ctx.usage.fill(timing, metadata)
        if llm.retries:
            metadata["llm_retries"] = llm.retries
        if ctx.llm.mixed_version_segments:
            # Parked across a `keep` weight update by a backend that does not say where the
            # update fell (before vLLM 0.33): those segments carry the version they started with.
            metadata["mixed_version_segments"] = ctx.llm.mixed_version_segments
        segments = llm.segments
        sampling = request.sampling.model_dump()
        reward = verdict.reward if verdict.outcome in SCORED_OUTCOMES else None
        fields: dict[str, Any] = {}
        if ctx.agents:
            fields["agents"] = ctx.agents.traces(None if reward is None else reward.agents)
        return trajectory_record(
            self.record,
            verdict,
            timing=timing,
            metadata=metadata,
            artifacts=extra.get("artifacts", {}),
            prompt_ids=llm.prompt_ids,
            response_ids=llm.response_ids,
            response_mask=llm.response_mask,
            response_logprobs=llm.response_logprobs,
            segments=segments,
            policy_versions=sorted({s.policy_version for s in segments}),
            num_turns=llm.num_turns,
            messages=list(llm.messages),
            tools=llm.tools,
            finish_reason=ctx.finish_reason or (segments[-1].finish_reason if segments else None),
            logprobs=logprobs_info(segments, sampling),
            routed_experts=llm.routed_experts,
            chains=ctx.recorded_chains(sampling),
            **fields,
        )


def _session(state: ServerState, request: JobRequest, policy: str) -> TokenSession:
    return TokenSession(
        state.backends,
        sampling=request.sampling.model_dump(exclude_none=True),
        tags=frozenset(request.backend_tags),
        max_response_tokens=request.limits.max_response_tokens,
        max_context_tokens=request.limits.max_context_tokens,
        gate=state.policies.get(policy).gate,
        metrics=state.metrics,
        request_timeout_s=state.settings.llm_request_timeout_s,
        backend_wait_s=state.settings.backend_wait_s,
        policy=policy,
    )
