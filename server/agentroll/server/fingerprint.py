"""A submission's identity, for idempotent resubmission (`POST /v1/jobs` with a known job id)."""

import hashlib
import json

from agentroll.server.schema import JobRequest


def request_fingerprint(request: JobRequest) -> str:
    """Identity of a submission for idempotency: everything but the job id and the policy
    versions, as canonical JSON (sorted keys), so the same request with its keys in another
    order is the same job. A version is when the trainer sent the job, not what it asks for:
    a trainer that crashed resubmits the same jobs stamped with its newer version, and must
    find them, not a conflict (the job keeps the version it was first admitted under)."""
    unversioned = request.model_copy(update={"policy_version": None})
    if request.agents is not None:
        agents = {
            n: a.model_copy(update={"policy_version": None}) for n, a in request.agents.items()
        }
        unversioned = unversioned.model_copy(update={"agents": agents})
    body = json.dumps(
        unversioned.model_dump(mode="json", exclude={"job_id"}),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()
