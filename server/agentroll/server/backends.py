"""Backend registrations, persisted: what the trainer registered survives a server restart."""

import asyncio
import contextlib
import logging

from agentroll.server.errors import BackendConflict, InvalidBackend, StoreError
from agentroll.server.llm import Backend, BackendPool
from agentroll.server.schema import BackendSpec
from agentroll.server.store import JobStore

log = logging.getLogger("agentroll.server.backends")


class PersistedBackends:
    """The pool's backends, each registration also written to the store."""

    def __init__(
        self,
        pool: BackendPool,
        store: JobStore,
        *,
        drain_timeout_s: float,
        background: set["asyncio.Task[None]"],
    ) -> None:
        """`background` collects drain tasks so that shutdown can wait for them."""
        self.pool = pool
        self._store = store
        self._drain_timeout_s = drain_timeout_s
        self._background = background

    async def restore(self) -> None:
        """Register again what was registered before a restart; a backend that can no longer
        be used (e.g. its tokenizer folder is gone) is skipped with an error, not fatal."""
        for spec_json in await self._store.backends():
            try:
                self.pool.add(BackendSpec.model_validate_json(spec_json))
            except (OSError, ValueError) as exc:
                log.error("not restoring backend %s: %s", spec_json[:200], exc)

    async def add(self, spec: BackendSpec) -> tuple[Backend, bool]:
        """Register (and persist) a backend; idempotent for an identical spec."""
        try:
            backend, created = self.pool.add(spec)
        except BackendConflict:
            raise  # a ValueError too, but the spec is fine: the id is taken
        except (OSError, ValueError) as exc:  # e.g. a tokenizer_path with no tokenizer in it
            raise InvalidBackend(f"cannot use this backend: {exc}") from exc
        if created:
            try:
                # a declaration the server contradicts is refused now, not found out per rollout
                await backend.learn_logprobs_mode()
            except ValueError as exc:
                self.pool.remove(backend.id)
                raise InvalidBackend(str(exc)) from exc
            try:
                await self._store.save_backend(backend.id, backend.spec.model_dump_json())
            except StoreError:
                self.pool.remove(backend.id)
                raise
        return backend, created

    def drain(self, backend_id: str) -> Backend | None:
        """No new requests to it; it is removed (and forgotten) once its in-flight calls end."""
        backend = self.pool.get(backend_id)
        if backend is None or backend.draining:
            return backend
        backend.draining = True
        task = asyncio.create_task(self._remove_when_idle(backend), name=f"drain:{backend_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return backend

    async def _remove_when_idle(self, backend: Backend) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(backend.idle.wait(), self._drain_timeout_s)
        await self.remove(backend.id)

    async def remove(self, backend_id: str) -> bool:
        if self.pool.get(backend_id) is None:
            return False
        await self._store.delete_backend(backend_id)
        return self.pool.remove(backend_id)
