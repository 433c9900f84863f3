"""Sandbox runtimes: one protocol, three backends (bwrap, singularity, local).

Names are imported on first use, so the in-sandbox action server (which lives in this
package) does not pay for pydantic or the backends when it starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentroll.runtime.base import Bind, ExecResult, Limits, Runtime, Sandbox, SandboxSpec
    from agentroll.runtime.config import BwrapConfig, LocalConfig, RuntimeConfig, SingularityConfig
    from agentroll.runtime.errors import (
        AddressExhausted,
        AgentrollRuntimeError,
        ContainmentError,
        RuntimeUnavailable,
        SandboxClosed,
        SandboxError,
        SandboxStartError,
        SandboxTimeout,
    )
    from agentroll.runtime.warm_pool import WarmPool

_EXPORTS = {
    "AddressExhausted": "errors",
    "AgentrollRuntimeError": "errors",
    "Bind": "base",
    "BwrapConfig": "config",
    "ContainmentError": "errors",
    "ExecResult": "base",
    "Limits": "base",
    "LocalConfig": "config",
    "Runtime": "base",
    "RuntimeConfig": "config",
    "RuntimeUnavailable": "errors",
    "Sandbox": "base",
    "SandboxClosed": "errors",
    "SandboxError": "errors",
    "SandboxSpec": "base",
    "SandboxStartError": "errors",
    "SandboxTimeout": "errors",
    "SingularityConfig": "config",
    "WarmPool": "warm_pool",
}

__all__ = [
    "AddressExhausted",
    "AgentrollRuntimeError",
    "Bind",
    "BwrapConfig",
    "ContainmentError",
    "ExecResult",
    "Limits",
    "LocalConfig",
    "Runtime",
    "RuntimeConfig",
    "RuntimeUnavailable",
    "Sandbox",
    "SandboxClosed",
    "SandboxError",
    "SandboxSpec",
    "SandboxStartError",
    "SandboxTimeout",
    "SingularityConfig",
    "WarmPool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentroll.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentroll.runtime.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
