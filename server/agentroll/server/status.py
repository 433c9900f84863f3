"""`GET /v1/status`: the server's state at a glance (stages, jobs, backends, policies)."""

from collections import Counter

from agentroll.server.admission import NodeAdmission
from agentroll.server.jobs import JobService
from agentroll.server.schema import AdmissionStatus, JobState, StageStatus, StatusResponse
from agentroll.server.state import ServerState


def server_status(state: ServerState, jobs: JobService) -> StatusResponse:
    """The server's resources from `state`, the stages and live jobs from `jobs`."""
    p, default = jobs.pipeline, state.policies.default
    states = Counter(j.state.value for j in jobs.live.values())
    return StatusResponse(
        accepting=jobs.accepting,
        paused=default.gate.paused,
        policy_version=default.gate.policy_version,
        max_policy_lag=default.max_policy_lag,
        stages={
            "init": StageStatus(
                capacity=p.init.capacity,
                busy=p.init.busy,
                queued=p.ready.queued + p.init.queued + sum(state.admission.waiting.values()),
            ),
            "run": StageStatus(capacity=p.run.capacity, busy=p.run.busy, queued=p.run.queued),
            "eval": StageStatus(capacity=p.eval.capacity, busy=p.eval.busy, queued=p.eval.queued),
        },
        ready=states.get(JobState.ready.value, 0),
        jobs_by_state=dict(states),
        backends=state.backends.views(),
        results_cursor=state.store.last_cursor,
        admission=_admission_status(state.admission, p.live),
        policies=state.policies.statuses(state.backends.all()),
    )


def _admission_status(admission: NodeAdmission, live: int) -> AdmissionStatus:
    node = admission.reading
    return AdmissionStatus(
        waiting={reason: n for reason, n in admission.waiting.items() if n},
        cpu_pressure=admission.cpu_pressure,
        live=live,
        live_limit=admission.live_limit,
        memory_available_bytes=node.memory_available,
        threads=node.threads,
    )
