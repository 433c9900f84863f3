"""Policy versions of a job: stamped at admission, held to the staleness bound.

A job is admitted under the current version of each policy it samples from (unless it names
one), so the version survives a restart. A job whose policy data lags the current weights too
far is not run. A single-agent job is judged by its `policy_version` against the default policy. A
multi-agent job is judged per trainable agent, by the version of that agent's policy it was
admitted under against that policy's current version and bound: a frozen agent's policy may
move on without making the episode stale, since nothing is trained on its trace.
"""

from agentroll.server.jobs.live import LiveJob
from agentroll.server.llm.policies import Policies
from agentroll.server.schema import DEFAULT_POLICY, JobRequest


def stamped(request: JobRequest, policies: Policies) -> JobRequest:
    """The request with the current version of each of its policies where it names none."""
    update: dict[str, object] = {}
    if request.policy_version is None:
        update["policy_version"] = policies.default.gate.policy_version
    if request.agents is not None:
        update["agents"] = {
            name: spec
            if spec.policy_version is not None
            else spec.model_copy(
                update={"policy_version": policies.get(spec.policy).gate.policy_version}
            )
            for name, spec in request.agents.items()
        }
    return request.model_copy(update=update) if update else request


def sampled_versions(request: JobRequest) -> list[tuple[str, int | None]]:
    """(policy, version at admission) of each policy whose staleness matters to the job."""
    if request.agents is None:
        return [(DEFAULT_POLICY, request.policy_version)]
    return [(a.policy, a.policy_version) for a in request.agents.values() if a.trainable]


def stale_reason(job: LiveJob, policies: Policies) -> str | None:
    """Why the job is too stale to run, or None."""
    for name, submitted in sampled_versions(job.request):
        policy = policies.get(name)
        bound, current = policy.max_policy_lag, policy.gate.policy_version
        if bound is None or submitted is None or current - submitted <= bound:
            continue
        which = "policy version" if name == DEFAULT_POLICY else f"policy {name!r} version"
        return f"{which} {submitted} lags the current {current} by more than {bound}"
    return None
