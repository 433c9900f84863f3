"""verifiers environments as handlers: v1 `Taskset` packages (`verifiers`: see `handler`) and
legacy `load_environment` packages (`verifiers_legacy`: see `legacy`)."""

from agentroll.handlers.builtin.verifiers_env.handler import VerifiersHandler, VerifiersInstance
from agentroll.handlers.builtin.verifiers_env.legacy import LegacyInstance, VerifiersLegacyHandler
from agentroll.handlers.builtin.verifiers_env.legacy_tasks import legacy_instances
from agentroll.handlers.builtin.verifiers_env.tasks import (
    UnsupportedEnvironment,
    verifiers_instances,
)
from agentroll.handlers.builtin.verifiers_env.venv import ensure_verifiers_venv
from agentroll.handlers.builtin.verifiers_env.workers import shutdown_default_workers

HANDLERS = {"verifiers": "VerifiersHandler", "verifiers_legacy": "VerifiersLegacyHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = [
    "LegacyInstance",
    "UnsupportedEnvironment",
    "VerifiersHandler",
    "VerifiersInstance",
    "VerifiersLegacyHandler",
    "ensure_verifiers_venv",
    "legacy_instances",
    "shutdown_default_workers",
    "verifiers_instances",
]
