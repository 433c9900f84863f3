"""The three-stage rollout pipeline: INIT -> ready buffer -> RUN -> EVAL.

Each stage has its own resizable worker limit, so a slow EVAL never holds back INIT or
RUN. Between INIT and RUN a bounded ready buffer applies backpressure: a job takes a
ready slot before its INIT starts and gives it back once it holds a RUN worker, so at
most `ready_buffer` sandboxes are initialising or waiting to run.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agentroll.handlers import AgentError, AgentHandler, ErrorDecision, Reward
from agentroll.handlers.budget import stop_margin_s
from agentroll.runtime.cpulimit import GradingUsage, grading_usage
from agentroll.server.admission import NodeAdmission
from agentroll.server.errors import Refused, StageTimeout
from agentroll.server.jobs.context import JobContext
from agentroll.server.jobs.live import LiveJob
from agentroll.server.limiter import StageLimiter
from agentroll.server.logs import stage_var
from agentroll.server.schema import JobState, Outcome, PoolSizes

T = TypeVar("T")
STOP_AGENT_TIMEOUT_S = 30.0


@dataclass(slots=True)
class Verdict:
    """How a rollout ended, before it becomes a trajectory."""

    outcome: Outcome
    reward: Reward | None = None
    error_type: str | None = None
    error_message: str | None = None
    error_stage: str | None = None


class _StageFailed(Exception):
    def __init__(self, stage: str, decision: ErrorDecision) -> None:
        super().__init__(decision.message)
        self.stage = stage
        self.decision = decision


class Pipeline:
    def __init__(
        self,
        pools: PoolSizes,
        admit: Callable[[LiveJob], None] | None = None,
        node: NodeAdmission | None = None,
        started: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`admit(job)` runs as a job is about to start INIT; it may raise `Refused`. `node`
        holds a job back from INIT while the node has no room (see `admission`).
        `started(job_id)` durably counts an attempt that starts, right before INIT's work."""
        self._admit = admit or (lambda job: None)
        self._started = started
        self.node = node
        self.ready = StageLimiter("ready_buffer", pools.ready_buffer)
        self.init = StageLimiter("init", pools.init)
        self.run = StageLimiter("run", pools.run)
        self.eval = StageLimiter("eval", pools.eval)
        self.live = 0
        """Jobs the node admitted (past `node`) and not yet finished."""

    def resize(self, **sizes: int | None) -> None:
        for name, limiter in (
            ("ready_buffer", self.ready),
            ("init", self.init),
            ("run", self.run),
            ("eval", self.eval),
        ):
            size = sizes.get(name)
            if size is not None:
                limiter.resize(size)

    async def execute(self, job: LiveJob, handler: AgentHandler, ctx: JobContext) -> Verdict:
        """Run all stages under the job's deadline. Cancellation propagates to the caller."""
        try:
            async with asyncio.timeout(ctx.time_left()) as deadline:
                return await self._stages(job, handler, ctx)
        except StageTimeout as exc:
            return Verdict(Outcome.timed_out, None, f"{exc.stage}_timeout", str(exc), exc.stage)
        except Refused as exc:
            return Verdict(Outcome.cancelled, None, exc.cause, str(exc), "queued")
        except _StageFailed as exc:
            d = exc.decision
            outcome = Outcome(d.outcome)
            # Every scored rollout is graded: a failure the policy caused where nothing could
            # grade it (INIT, EVAL, a RUN error not evaluated) earns 0, and says why.
            reward = Reward(0.0, {"reason": d.cause}) if outcome is Outcome.agent_error else None
            return Verdict(outcome, reward, d.cause, d.message, exc.stage)
        except TimeoutError:
            if not deadline.expired():
                raise
            stage = job.state.value if not job.state.terminal else None
            message = f"job deadline of {job.request.limits.deadline_s:g} s passed"
            return Verdict(Outcome.timed_out, None, "deadline_exceeded", message, stage)

    async def _stages(self, job: LiveJob, handler: AgentHandler, ctx: JobContext) -> Verdict:
        await self._enter(job, "init", self.ready)
        try:
            await self._wait_for_node(job)
        except BaseException:
            self.ready.release()
            raise
        self.live += 1
        try:
            return await self._admitted_stages(job, handler, ctx)
        finally:
            self.live -= 1

    async def _admitted_stages(
        self, job: LiveJob, handler: AgentHandler, ctx: JobContext
    ) -> Verdict:
        """The stages of a job the node admitted; it holds a ready slot until it runs."""
        limits = job.request.limits
        try:
            await self._enter(job, "init", self.init)
            try:
                self._admit(job)
                if self._started is not None:
                    await self._started(job.job_id)
                job.attempts += 1
                await self._work(
                    job, "init", handler.init, handler.on_init_error, ctx, limits.init_timeout_s
                )
            finally:
                self.init.release()
            job.state = JobState.ready
            await self._enter(job, "run", self.run)
        finally:
            self.ready.release()
        run_failure: _StageFailed | None = None
        try:
            await self._work(
                job, "run", handler.run, handler.on_run_error, ctx, limits.run_timeout_s
            )
        except _StageFailed as exc:
            if not exc.decision.evaluate:
                raise
            run_failure = exc  # the policy's fault: still scored
        finally:
            self.run.release()
        if handler.eval_sandbox == "fresh":
            ctx.release_sandboxes()  # EVAL starts its own; the agent's sandbox cannot leak in
        reward = await self._evaluate(job, handler, ctx)
        if run_failure is not None:
            d = run_failure.decision
            return Verdict(Outcome.agent_error, reward, d.cause, d.message, "run")
        return Verdict(Outcome.ok, reward)

    async def _evaluate(self, job: LiveJob, handler: AgentHandler, ctx: JobContext) -> Reward:
        """EVAL, its graders' commands accounted in the job's timing."""
        limits = job.request.limits
        timeout_s = limits.eval_timeout_s
        await self._enter(job, "eval", self.eval)
        # Graders' CPU-limited commands end their wall-clock backstops inside EVAL and inside
        # the agent's share of the deadline (the time the server took does not count: when its
        # queues leave EVAL too little, the deadline ends the job `timed_out`, never a backstop
        # an honest answer into a 0).
        room = min(timeout_s, limits.deadline_s - ctx.agent_time()) - stop_margin_s(timeout_s)
        usage = GradingUsage(deadline=time.monotonic() + room)
        grading = grading_usage.set(usage)
        try:
            return await self._work(
                job, "eval", self._grader(handler), handler.on_eval_error, ctx, timeout_s
            )
        finally:
            grading_usage.reset(grading)
            self.eval.release()
            job.timing.grade_wall_s = usage.wall_s
            job.timing.grade_cpu_s = None if usage.unmeasured else usage.cpu_s

    @staticmethod
    def _grader(handler: AgentHandler) -> Callable[[JobContext], Awaitable[Reward]]:
        """EVAL: the handler's own, after the agent's processes are gone (tests arrive only
        once nothing the policy started can still run)."""
        if handler.eval_sandbox == "fresh" or not handler.stop_agent_before_eval:
            return handler.eval

        async def graded(ctx: JobContext) -> Reward:
            await ctx.stop_agent_processes(STOP_AGENT_TIMEOUT_S)
            return await handler.eval(ctx)

        return graded

    async def _wait_for_node(self, job: LiveJob) -> None:
        """Admission that fits the node, counted as INIT queue time."""
        if self.node is None:
            return
        waited_from = time.monotonic()
        try:
            await self.node.admit(lambda: self.init.busy, lambda: self.live, self._idle)
        finally:
            job.stage_timing("init").queue_s += time.monotonic() - waited_from

    def _idle(self) -> bool:
        return not (self.init.busy or self.run.busy or self.eval.busy)

    async def _enter(self, job: LiveJob, stage: str, limiter: StageLimiter) -> None:
        """Wait for a worker of `limiter`, counting the wait as `stage` queue time."""
        waited_from = time.monotonic()
        try:
            await limiter.acquire()
        finally:
            job.stage_timing(stage).queue_s += time.monotonic() - waited_from

    async def _work(
        self,
        job: LiveJob,
        stage: str,
        fn: Callable[[Any], Awaitable[T]],
        on_error: Callable[[Any, BaseException], ErrorDecision],
        ctx: JobContext,
        timeout_s: float,
    ) -> T:
        job.state = JobState(stage)
        stage_var.set(stage)
        began = job.working_since = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s) as stage_timer:
                return await fn(ctx)
        except TimeoutError as exc:
            if stage_timer.expired():
                raise StageTimeout(stage, timeout_s) from exc
            raise self._failure(stage, on_error, ctx, exc) from exc
        except (asyncio.CancelledError, _StageFailed, StageTimeout):
            raise
        except Exception as exc:
            raise self._failure(stage, on_error, ctx, exc) from exc
        finally:
            job.working_since = None
            job.stage_timing(stage).work_s += time.monotonic() - began

    @staticmethod
    def _failure(
        stage: str,
        on_error: Callable[[Any, BaseException], ErrorDecision],
        ctx: JobContext,
        exc: BaseException,
    ) -> _StageFailed:
        if isinstance(exc, AgentError) and exc.finish_reason and ctx.finish_reason is None:
            ctx.finish_reason = exc.finish_reason
        try:
            decision = on_error(ctx, exc)
        except Exception as hook_exc:  # a broken hook must not hide the original failure
            decision = ErrorDecision(
                "infra_error", f"{stage}_error_hook_failed", f"{exc!r}; hook raised {hook_exc!r}"
            )
        return _StageFailed(stage, decision)
