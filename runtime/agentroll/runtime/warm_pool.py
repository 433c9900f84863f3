"""A warm pool: pre-started sandboxes per spec, handed out without waiting for a start.

Sandboxes are interchangeable when their specs are equal apart from the label
(``SandboxSpec.pool_key``). ``acquire`` pops a ready, still-running sandbox and refills the
pool in the background; with none ready it starts one directly, so the pool only ever makes
acquisition faster, never different. A pooled sandbox is handed out once and never returned:
the caller stops it as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from agentroll.runtime.base import SandboxSpec
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.errors import SandboxClosed, SandboxError
from agentroll.runtime.sandbox import ProcessSandbox

log = logging.getLogger(__name__)


class WarmPool:
    def __init__(self, runtime: BaseRuntime, *, size: int, start_timeout: float = 30.0) -> None:
        if size < 0:
            raise ValueError("pool size must be >= 0")
        self.runtime = runtime
        self.size = size
        self.start_timeout = start_timeout
        self._ready: dict[SandboxSpec, deque[ProcessSandbox]] = {}
        self._pending: dict[SandboxSpec, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def idle(self, spec: SandboxSpec) -> int:
        """Ready sandboxes for ``spec``."""
        return len(self._ready.get(spec.pool_key(), ()))

    async def warm(self, spec: SandboxSpec) -> None:
        """Fill the pool for ``spec`` up to ``size`` and wait until those starts finish."""
        self._refill(spec.pool_key())
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def acquire(self, spec: SandboxSpec, *, timeout: float) -> ProcessSandbox:  # noqa: ASYNC109 (contract)
        if self._closed:
            raise SandboxClosed("warm pool is closed")
        key = spec.pool_key()
        ready = self._ready.get(key)
        sandbox = None
        while ready:
            candidate = ready.popleft()
            if candidate.alive:
                sandbox = candidate
                break
            self._spawn(candidate.stop(grace_s=0))  # died while idle: clean it up
        self._refill(key)
        if sandbox is None:
            return await self.runtime.start(spec, timeout=timeout)
        sandbox.spec = spec  # equal but for the label
        sandbox.lease.label = spec.label
        return sandbox

    def _refill(self, key: SandboxSpec) -> None:
        if self._closed:
            return
        missing = self.size - len(self._ready.get(key, ())) - self._pending.get(key, 0)
        for _ in range(max(missing, 0)):
            self._pending[key] = self._pending.get(key, 0) + 1
            self._spawn(self._start_one(key))

    async def _start_one(self, key: SandboxSpec) -> None:
        try:
            sandbox = await self.runtime.start(key, timeout=self.start_timeout)
        except SandboxError as exc:
            log.warning("warm pool: start failed: %s", exc)
            return
        finally:
            self._pending[key] -= 1
        if self._closed:
            await sandbox.stop(grace_s=0)
        else:
            self._ready.setdefault(key, deque()).append(sandbox)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every idle sandbox; in-flight starts are awaited and stopped too."""
        self._closed = True
        with contextlib.suppress(Exception):
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        idle = [sb for q in self._ready.values() for sb in q]
        self._ready.clear()
        await asyncio.gather(*(sb.stop(grace_s=0) for sb in idle), return_exceptions=True)
