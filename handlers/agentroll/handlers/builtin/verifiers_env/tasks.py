"""A verifiers taskset's tasks as `verifiers` job instances: each task's data, as the
taskset's own `load()` made it, becomes one instance; `environment` names how to load it."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.verifiers_env.handler import EnvironmentSpec
from agentroll.handlers.builtin.verifiers_env.venv import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import default_workers
from agentroll.handlers.errors import UnsupportedEnvironment

LIST_TIMEOUT_S = 600.0


async def listing(python: Path, request: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The worker's answer to a listing `request`; an environment (`kind` `name`) that does
    not load, or needs what is not run, raises before any instance exists."""
    reply = await default_workers().ask(python, request, LIST_TIMEOUT_S)
    if not reply.get("ok"):
        raise RuntimeError(f"the {kind} {name!r} cannot load: {reply.get('error')}")
    if reply["unsupported"]:
        raise UnsupportedEnvironment(f"{name}: " + "; ".join(reply["unsupported"]))
    return reply


async def verifiers_instances(
    taskset: str,
    packages: Sequence[str] = (),
    config: dict[str, Any] | None = None,
    *,
    skip: int = 0,
    limit: int = 1000,
    score_timeout_s: float = 60.0,
) -> list[dict[str, Any]]:
    """The instances of tasks `skip` to `skip + limit` of `taskset` (installed from
    `packages` into the verifiers environment first, if it is not cached yet)."""
    spec = EnvironmentSpec(
        taskset=taskset,
        packages=list(packages),
        config=config or {},
        score_timeout_s=score_timeout_s,
    )
    venv = await ensure_verifiers_venv(spec.packages)
    request = {"op": "tasks", "taskset": spec.taskset_config(), "skip": skip, "limit": limit}
    reply = await listing(venv.python, request, "taskset", taskset)
    environment = spec.model_dump(mode="json")
    return [{"environment": environment, "task": t["data"]} for t in reply["tasks"]]
