"""Pause and resume generation around a trainer's weight update, across every backend.

The gate in front of all generation calls is the barrier; the backends' own pause/resume
endpoints are called where they exist, so `abort` returns partial tokens (vLLM 0.33) and
`keep` parks requests inside the engine. Backends without them still never receive a new
request while paused: the gate alone guarantees that.

The pause state and the policy version are persisted (a server killed mid-sync comes back
paused, at the version it had). On resume the new version is in force *before* any backend
is told to resume: tokens that parked requests sample with the new weights are stamped with
it, whichever backend resumes first.
"""

import asyncio
import logging
import time

from agentroll.server import recovery
from agentroll.server.errors import PauseTimeout, VersionConflict
from agentroll.server.schema import PauseMode, PauseResponse
from agentroll.server.service import JobService

log = logging.getLogger("agentroll.server.weight_sync")
BACKEND_CONTROL_TIMEOUT_S = 30.0


async def _forward(service: JobService, action: str, *args: str) -> dict[str, str]:
    """Call `pause`/`resume` on every backend; returns the failures by backend id."""
    calls = {}
    for backend in service.backends.all():
        control = getattr(backend.client, action, None)
        if control is not None:
            calls[backend.id] = asyncio.wait_for(control(*args), BACKEND_CONTROL_TIMEOUT_S)
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    errors = {}
    for backend_id, result in zip(calls, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("backend %s: %s failed: %r", backend_id, action, result)
            errors[backend_id] = f"{type(result).__name__}: {result}"
    return errors


def _response(service: JobService, began: float, errors: dict[str, str]) -> PauseResponse:
    gate = service.gate
    return PauseResponse(
        paused=gate.paused,
        mode=gate.mode,
        policy_version=gate.policy_version,
        in_flight=gate.in_flight,
        waited_s=time.monotonic() - began,
        backend_errors=errors,
    )


async def pause(service: JobService, mode: PauseMode, timeout_s: float) -> PauseResponse:
    """Close the gate; return once quiet (wait, abort) or once backends parked (keep)."""
    began = time.monotonic()
    service.gate.close(mode)
    await recovery.save_control(service)  # before anything else: a crash from here on stays paused
    errors: dict[str, str] = {}
    if mode in ("abort", "keep"):
        errors = await _forward(service, "pause", mode)
    if mode == "abort":
        # Backends that aborted their requests themselves answer them with partial tokens;
        # only calls to the others are cancelled here (their tokens are sampled again).
        done_by_backend = frozenset(b.id for b in service.backends.all() if b.id not in errors)
        service.gate.abort_in_flight(spare=done_by_backend)
    if mode != "keep" and not await service.gate.wait_quiet(timeout_s):
        raise PauseTimeout(_response(service, began, errors))
    return _response(service, began, errors)


async def resume(
    service: JobService, policy_version: int, max_policy_lag: int | None
) -> PauseResponse:
    began = time.monotonic()
    if policy_version < service.gate.policy_version:
        raise VersionConflict(
            f"policy_version {policy_version} is older than the current "
            f"{service.gate.policy_version}"
        )
    gate = service.gate
    gate.policy_version = policy_version  # still closed: nothing new is dispatched yet
    errors = await _forward(service, "resume") if gate.mode in ("abort", "keep") else {}
    if max_policy_lag is not None:
        service.max_policy_lag = max_policy_lag
    # A store that refuses the write leaves the gate closed (the trainer retries resume).
    await recovery.save_control(service, paused=False)
    gate.open(policy_version)
    if service.settings.cancel_stale_running:
        stale = service.cancel_stale_running()
        if stale:
            log.info("cancelled %d running jobs behind policy %d", len(stale), policy_version)
    return _response(service, began, errors)
