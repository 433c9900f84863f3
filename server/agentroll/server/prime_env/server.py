"""agentroll as a prime-rl env server: verifiers v1's ZMQ protocol (`health`, `run`, `cancel`).

prime-rl's orchestrator holds one `EnvClient` per environment, a ZMQ DEALER that sends
`[request id, method, msgpack payload]` and matches replies `[request id, msgpack payload]`
(verifiers commit a60a606, `verifiers/v1/serve/client.py`, `server.py`, `types.py`). This
server is a ROUTER bound at `--address`; each `run` becomes one agentroll job of `--handler`:

- `task_data` is the job's instance; `sampling` gives temperature, top_p and max_tokens;
- `client.base_url` and `model` name the inference server the orchestrator trains: it is
  registered as an agentroll backend (id and tag `prime-<hash>`, its URL without a trailing
  `/v1`) and the job is routed to it, so the tokens come from the policy being trained;
- the answer is a verifiers v1 episode (`exports.verifiers_episode`): a scored rollout is
  `ok` with its traces; an `infra_error`, `timed_out` or `cancelled` one is `ok: false` with
  its error and no trace, which prime-rl drops, never a reward of 0.

`cancel` aborts a run in flight (its job is cancelled on the agentroll server) and the run
answers `success: false`, as upstream's server does. Every run is bounded by `--timeout`.
Mapping: docs/trainers_out.md.
"""

import asyncio
import contextlib
import hashlib
import logging
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from agentroll.server.schema import BackendSpec
from agentroll.trainer_clients import AsyncRolloutClient
from agentroll.trainer_clients.errors import ClientError
from agentroll.trainer_clients.exports.verifiers_episode import to_episode

log = logging.getLogger(__name__)

CANCELLED = "Cancelled: rollout aborted"


def backend_for(base_url: str, model: str) -> BackendSpec:
    """The agentroll backend for the orchestrator's inference server (same spec each time,
    so registering it again is a no-op)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    backend_id = "prime-" + hashlib.sha256(f"{root}\n{model}".encode()).hexdigest()[:12]
    return BackendSpec.model_validate(
        {"id": backend_id, "base_url": root, "model": model, "tags": [backend_id]}
    )


def _sampling(raw: dict[str, Any]) -> dict[str, Any]:
    chosen = {
        "temperature": raw.get("temperature"),
        "top_p": raw.get("top_p"),
        "max_tokens": raw.get("max_tokens") or raw.get("max_completion_tokens"),
    }
    return {k: v for k, v in chosen.items() if v is not None}


class PrimeEnvServer:
    def __init__(
        self,
        client: AsyncRolloutClient,
        *,
        handler: str,
        address: str = "tcp://127.0.0.1:5000",
        timeout_s: float = 3600.0,
        env_id: str = "agentroll",
    ) -> None:
        self.client = client
        self.handler = handler
        self.timeout_s = timeout_s
        self.env_id = env_id
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(address)
        self.address: str = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        """The bound endpoint (its real port when `address` ended in `:0`)."""
        self._running: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._aborted: set[str] = set()
        self._replies: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Answer requests until cancelled; then every run in flight is cancelled too."""
        try:
            while True:
                frames = await self.socket.recv_multipart()
                if len(frames) != 4:  # client id, request id, method, payload
                    log.warning("dropped a message of %d frames", len(frames))
                    continue
                client_id, request_id, method, payload = frames
                task = asyncio.create_task(self._reply(client_id, request_id, method, payload))
                self._replies.add(task)
                task.add_done_callback(self._replies.discard)
        finally:
            for task in list(self._replies):
                task.cancel()
            await asyncio.gather(*self._replies, return_exceptions=True)
            self.socket.close()
            self.ctx.term()

    async def _reply(
        self, client_id: bytes, request_id: bytes, method: bytes, payload: bytes
    ) -> None:
        try:
            response = await self._answer(request_id.decode(), method.decode(), payload)
        except (ValueError, TypeError, KeyError, ClientError, TimeoutError) as exc:
            # A bad request, an unreachable agentroll or a rollout out of time: an error
            # reply (the orchestrator records a failed episode), never a scored one.
            response = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
        data = msgpack.packb(response, use_bin_type=True)
        with contextlib.suppress(zmq.ZMQError):  # the client went away
            await self.socket.send_multipart([client_id, request_id, data])

    async def _answer(self, request_id: str, method: str, payload: bytes) -> dict[str, Any]:
        raw = msgpack.unpackb(payload, raw=False)
        if method == "health":
            return {"success": True, "error": None}
        if method == "cancel":
            running = self._running.get(str(raw["request_id"]))
            if running is not None:
                self._aborted.add(str(raw["request_id"]))
                running.cancel()
            return {"success": True, "error": None, "cancelled": running is not None}
        if method != "run":
            return {"success": False, "error": f"unknown method {method!r}"}
        run = asyncio.create_task(self._run(request_id, raw))
        self._running[request_id] = run
        try:
            return await run
        except asyncio.CancelledError:
            if request_id not in self._aborted:
                raise  # the server is stopping
            return {"success": False, "error": CANCELLED}
        finally:
            self._running.pop(request_id, None)
            self._aborted.discard(request_id)

    async def _run(self, request_id: str, raw: dict[str, Any]) -> dict[str, Any]:
        task_data = raw["task_data"]
        if not isinstance(task_data, dict):
            raise TypeError("task_data must be an object")
        backend = backend_for(str(raw["client"]["base_url"]), str(raw["model"]))
        await self.client.add_backend(backend)
        job_id = f"prime-{request_id}"
        job = {
            "job_id": job_id,
            "handler": self.handler,
            "instance": task_data,
            "sampling": _sampling(raw.get("sampling") or {}),
            "backend_tags": backend.tags,
        }
        await self.client.submit([job])
        try:
            done = await self.client.wait_for([job_id], self.timeout_s)
        except BaseException:  # cancelled or out of time: the job must not go on without us
            await asyncio.shield(self._cancel_job(job_id))
            raise
        task = {"type": self.handler, "data": task_data}
        return {
            "success": True,
            "error": None,
            "episode": to_episode(done[job_id], task, self.env_id),
        }

    async def _cancel_job(self, job_id: str) -> None:
        with contextlib.suppress(ClientError, ConnectionError):
            await self.client.cancel(job_id)
