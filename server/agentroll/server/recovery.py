"""What a server restores at start and persists for the next one.

At start: each policy's version, pause state and the staleness bound a resume set, as the
previous server left them (a server killed during a weight sync comes back paused, at the
version it had), the registered backends, and every job it left unfinished — requeued or
reported `infra_error`/`server_restart`, as configured. Requeues are counted by work, not by
restarts: only attempts that started (entered INIT) count, so a job still waiting in the
queue survives any number of restarts, while one whose every attempt ended in a dead server
ends `infra_error`/`requeue_limit` after `max_requeues` requeues (a rollout that kills its
server is not replayed forever).
"""

import logging
from typing import Any

from agentroll.server.jobs import JobService, LiveJob, Verdict, unrun_trajectory
from agentroll.server.llm.policies import Policies, Policy
from agentroll.server.schema import DEFAULT_POLICY, JobRequest, Outcome
from agentroll.server.state import ServerState
from agentroll.server.store import JobRow, JobStore

log = logging.getLogger("agentroll.server")
POLICY_KEY_PREFIX = "policy:"
"""Control-table key of a non-default policy's state."""


async def recover(state: ServerState, jobs: JobService) -> None:
    """Restore control state and backends; requeue (or fail) unfinished jobs."""
    await restore_control(state.store, state.policies)
    await state.persisted_backends.restore()
    rows = await state.store.unfinished()
    if not rows:
        return
    unfinished = [_revive(row) for row in rows]
    if state.settings.on_restart == "requeue":
        limit = state.settings.max_requeues
        spent = [j for j in unfinished if j.attempts > limit]
        again = [j for j in unfinished if j.attempts <= limit]
        message = f"its attempts started {limit + 1} times or more, each ended by a restart"
        await _fail_all(jobs, spent, "requeue_limit", message)
        for job in again:
            jobs.launch(job)
        log.warning("requeued %d jobs left unfinished by a previous server", len(again))
        return
    await _fail_all(jobs, unfinished, "server_restart", "the server restarted mid-rollout")


async def restore_control(store: JobStore, policies: Policies) -> None:
    """Each policy's version, pause state and resumed staleness bound as the previous server
    left them."""
    saved = await store.control()
    _restore(policies.default, saved)
    for key, state in saved.items():
        if key.startswith(POLICY_KEY_PREFIX) and isinstance(state, dict):
            _restore(policies.get(key.removeprefix(POLICY_KEY_PREFIX)), state)


def _restore(policy: Policy, saved: dict[str, Any]) -> None:
    gate = policy.gate
    gate.policy_version = int(saved.get("policy_version", 0))
    if isinstance(saved.get("max_policy_lag"), int):
        policy.max_policy_lag, policy.lag_from_resume = saved["max_policy_lag"], True
    if saved.get("paused"):
        gate.close(saved.get("pause_mode") or "wait")
        log.warning(
            "generation of policy %s stays paused (%s) as the previous server left it; "
            "resume to go on",
            policy.name,
            gate.mode,
        )


async def save_control(store: JobStore, policy: Policy, *, paused: bool | None = None) -> None:
    """Persist a policy's version, pause state (or `paused`, about to be in force) and the
    staleness bound a resume set. The default policy keeps the keys it always had; the others
    have one key each, so pausing two policies at once never loses either write. Raises
    `StoreError` when the store refuses the write."""
    gate = policy.gate
    state: dict[str, Any] = {
        "policy_version": gate.policy_version,
        "paused": gate.paused if paused is None else paused,
        "pause_mode": gate.mode,
    }
    if policy.lag_from_resume:
        state["max_policy_lag"] = policy.max_policy_lag
    if policy.name != DEFAULT_POLICY:
        state = {POLICY_KEY_PREFIX + policy.name: state}
    await store.save_control(state)


async def _fail_all(jobs: JobService, failed: list[LiveJob], cause: str, message: str) -> None:
    for job in failed:
        verdict = Verdict(Outcome.infra_error, None, cause, message)
        await jobs.persist(job, unrun_trajectory(job, verdict))
    if failed:
        log.warning("reported %d interrupted jobs as infra_error (%s)", len(failed), cause)


def _revive(row: JobRow) -> LiveJob:
    request = JobRequest.model_validate_json(row.request_json)
    return LiveJob(row.job_id, request, row.submitted_at, attempts=row.attempts)
