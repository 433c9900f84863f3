"""verifiers environments (v1 `Taskset` packages) as the `verifiers` handler: see `handler`."""

from agentroll.handlers.builtin.verifiers_env.handler import VerifiersHandler, VerifiersInstance
from agentroll.handlers.builtin.verifiers_env.tasks import (
    UnsupportedEnvironment,
    verifiers_instances,
)
from agentroll.handlers.builtin.verifiers_env.venv import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import shutdown_default_workers

HANDLERS = {"verifiers": "VerifiersHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = [
    "UnsupportedEnvironment",
    "VerifiersHandler",
    "VerifiersInstance",
    "ensure_verifiers_venv",
    "shutdown_default_workers",
    "verifiers_instances",
]
