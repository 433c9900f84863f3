"""`GET /v1/status`: the server's state at a glance (stages, jobs, backends, policies)."""

from collections import Counter

from agentroll.server.jobs import JobService
from agentroll.server.schema import AdmissionStatus, JobState, StageStatus, StatusResponse


def server_status(service: JobService) -> StatusResponse:
    p = service.pipeline
    states = Counter(j.state.value for j in service.live.values())
    return StatusResponse(
        accepting=service.accepting,
        paused=service.gate.paused,
        policy_version=service.gate.policy_version,
        max_policy_lag=service.max_policy_lag,
        stages={
            "init": StageStatus(
                capacity=p.init.capacity,
                busy=p.init.busy,
                queued=p.ready.queued + p.init.queued + sum(service.admission.waiting.values()),
            ),
            "run": StageStatus(capacity=p.run.capacity, busy=p.run.busy, queued=p.run.queued),
            "eval": StageStatus(capacity=p.eval.capacity, busy=p.eval.busy, queued=p.eval.queued),
        },
        ready=states.get(JobState.ready.value, 0),
        jobs_by_state=dict(states),
        backends=service.backends.views(),
        results_cursor=service.store.last_cursor,
        admission=_admission_status(service),
        policies=service.policies.statuses(service.backends.all()),
    )


def _admission_status(service: JobService) -> AdmissionStatus:
    node = service.admission.reading
    return AdmissionStatus(
        waiting={reason: n for reason, n in service.admission.waiting.items() if n},
        cpu_pressure=service.admission.cpu_pressure,
        live=service.pipeline.live,
        live_limit=service.admission.live_limit,
        memory_available_bytes=node.memory_available,
        threads=node.threads,
    )
