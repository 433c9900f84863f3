"""Pause and resume generation around a trainer's weight update, one policy at a time.

Each policy has its own gate in front of every generation call that samples from it (a
single-agent deployment has one policy, `default`). Pausing a policy closes its gate and calls
the pause/resume endpoints of *its* backends where they exist, so `abort` returns partial
tokens (vLLM 0.33) and `keep` parks requests inside the engine; agents of other policies keep
generating. Backends without those endpoints still never receive a new request of a paused
policy: the gate alone guarantees that.

A policy's pause state and version are persisted (a server killed mid-sync comes back paused,
at the version it had). On resume the new version is in force *before* any backend is told to
resume: tokens that parked requests sample with the new weights are stamped with it, whichever
backend resumes first.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from agentroll.server import recovery
from agentroll.server.errors import PauseTimeout, UnknownPolicy, VersionConflict
from agentroll.server.llm import BackendPool
from agentroll.server.llm.base import BackendClient, BackendError
from agentroll.server.llm.policies import Policy
from agentroll.server.llm.vllm import VLLMClient
from agentroll.server.schema import DEFAULT_POLICY, PauseMode, PauseResponse
from agentroll.server.state import ServerState

log = logging.getLogger("agentroll.server.weight_sync")
BACKEND_CONTROL_TIMEOUT_S = 30.0


async def _says_which_weights_sampled(client: BackendClient) -> bool:
    """Whether the backend's answers say which weights sampled which tokens (vLLM 0.33's
    `weight_versions`); vLLM 0.12-0.32 and SGLang's clients do not."""
    if not isinstance(client, VLLMClient):
        return False
    try:
        return (client.family or await client.detect()) == "0.33"
    except BackendError:
        return False  # unknown: treated as the safe case, which never mixes versions


async def _pause_backend(client: BackendClient, mode: PauseMode) -> None:
    """`keep` parks calls inside the engine across the weight update. Where the answer will
    not say where the update fell, the engine is paused with `abort` instead: it answers
    each call with the tokens sampled so far (all by the old weights) and the session
    continues the turn after resume, so every token's version is exact."""
    if mode == "keep" and not await _says_which_weights_sampled(client):
        mode = "abort"
    await client.pause(mode)


async def _forward(
    backends: BackendPool, policy: Policy, action: str, mode: PauseMode | None = None
) -> dict[str, str]:
    """Call `pause`/`resume` on every backend of `policy`; returns the failures by backend id."""
    calls = {}
    for backend in backends.all():
        control = getattr(backend.client, action, None)
        if control is None or backend.policy != policy.name:
            continue
        call = control() if mode is None else _pause_backend(backend.client, mode)
        calls[backend.id] = asyncio.wait_for(call, BACKEND_CONTROL_TIMEOUT_S)
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    errors = {}
    for backend_id, result in zip(calls, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("backend %s: %s failed: %r", backend_id, action, result)
            errors[backend_id] = f"{type(result).__name__}: {result}"
    return errors


def _known_policy(state: ServerState, name: str) -> Policy:
    """The policy `name`; refused if nothing serves or uses it: a mistyped name must not
    look paused while the policy meant keeps generating and is never versioned."""
    served = {b.policy for b in state.backends.all()}
    if name != DEFAULT_POLICY and name not in state.policies and name not in served:
        raise UnknownPolicy(name, {p.name for p in state.policies} | served)
    return state.policies.get(name)


def _response(policy: Policy, began: float, errors: dict[str, str]) -> PauseResponse:
    gate = policy.gate
    return PauseResponse(
        policy=policy.name,
        paused=gate.paused,
        mode=gate.mode,
        policy_version=gate.policy_version,
        in_flight=gate.in_flight,
        waited_s=time.monotonic() - began,
        backend_errors=errors,
    )


async def pause(
    state: ServerState, mode: PauseMode, timeout_s: float, policy_name: str = DEFAULT_POLICY
) -> PauseResponse:
    """Close the policy's gate; return once quiet (wait, abort) or once its backends parked
    (keep)."""
    began = time.monotonic()
    policy = _known_policy(state, policy_name)
    policy.gate.close(mode)
    # Before anything else: a crash from here on stays paused.
    await recovery.save_control(state.store, policy)
    errors: dict[str, str] = {}
    if mode in ("abort", "keep"):
        errors = await _forward(state.backends, policy, "pause", mode)
    if mode == "abort":
        # Backends that aborted their requests themselves answer them with partial tokens;
        # only calls to the others are cancelled here (their tokens are sampled again).
        done_by_backend = frozenset(
            b.id for b in state.backends.all() if b.policy == policy.name and b.id not in errors
        )
        policy.gate.abort_in_flight(spare=done_by_backend)
    if mode != "keep" and not await policy.gate.wait_quiet(timeout_s):
        raise PauseTimeout(_response(policy, began, errors))
    return _response(policy, began, errors)


async def resume(
    state: ServerState,
    cancel_stale_running: Callable[[], list[str]],
    policy_version: int,
    max_policy_lag: int | None,
    policy_name: str = DEFAULT_POLICY,
) -> PauseResponse:
    """Reopen the policy's gate at `policy_version`; where the settings say so,
    `cancel_stale_running()` (the job table's) then cancels what now lags too far."""
    began = time.monotonic()
    policy = _known_policy(state, policy_name)
    gate = policy.gate
    if policy_version < gate.policy_version:
        raise VersionConflict(
            f"policy_version {policy_version} is older than the current {gate.policy_version}"
            + ("" if policy.name == DEFAULT_POLICY else f" of policy {policy.name!r}")
        )
    gate.announce(policy_version)  # still closed: nothing new is dispatched yet
    if gate.mode == "keep":
        # Backends paused with abort for it answered every call they held at the pause; one
        # still unanswered reached the engine after its pause and would be sampled by the new
        # weights under no version anyone can tell: cancelled, it is sampled again.
        labelled = [
            b.id
            for b in state.backends.all()
            if b.policy == policy.name and await _says_which_weights_sampled(b.client)
        ]
        gate.abort_in_flight(spare=frozenset(labelled))
    paused_in_backends = gate.mode in ("abort", "keep")
    errors = await _forward(state.backends, policy, "resume") if paused_in_backends else {}
    if max_policy_lag is not None:
        policy.max_policy_lag, policy.lag_from_resume = max_policy_lag, True
    # A store that refuses the write leaves the gate closed (the trainer retries resume).
    await recovery.save_control(state.store, policy, paused=False)
    gate.open(policy_version)
    if state.settings.cancel_stale_running:
        stale = cancel_stale_running()
        if stale:
            log.info(
                "cancelled %d running jobs behind policy %s version %d",
                len(stale),
                policy.name,
                policy_version,
            )
    return _response(policy, began, errors)
