"""prime-rl's side of the verifiers v1 env-server protocol, for tests of
`agentroll prime-env-server`.

Written from upstream source (verifiers v1 needs packages this environment does not carry,
so it is not imported here):

- verifiers, commit a60a606ecc4d309247edf9ff92c3eabca362781f: `verifiers/v1/serve/client.py`
  (`EnvClient`: a DEALER socket, `[request id, method, msgpack payload]` out, `[request id,
  payload]` back; a reply with `success` false raises), `verifiers/v1/serve/types.py` (the
  requests and responses), `verifiers/v1/episode.py` (`Episode`), `verifiers/v1/trace.py`
  (`Trace.reward`: the sum of score x weight; `Branch`: token ids, sampled mask and logprobs
  concatenated along a root-to-leaf path of nodes) and `verifiers/v1/graph.py`
  (`MessageNode`), `verifiers/v1/types.py` (messages);
- prime-rl, commit 559b44772e471d1538537b8805cc77f3824a5e64: `src/prime_rl/orchestrator/
  envs.py` (`Env.run`) and `dispatcher.py` (an episode not `ok`, or a trace with no sampled
  turn, is an error and is not trained on).
"""

import asyncio
import uuid
from typing import Any

import msgpack
import zmq
import zmq.asyncio

ROLES = {"system", "user", "assistant", "tool"}


class EnvServerError(RuntimeError):
    """A reply with `success` false (upstream raises `RuntimeError(error)`)."""


class EnvClient:
    def __init__(self, address: str) -> None:
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._receiver: asyncio.Task[None] | None = None

    async def _receive(self) -> None:
        while True:
            request_id, data = await self.socket.recv_multipart()
            future = self._pending.pop(request_id.decode(), None)
            if future is not None and not future.done():
                future.set_result(data)

    async def request(
        self, method: str, payload: dict[str, Any], timeout_s: float, request_id: str | None = None
    ) -> dict[str, Any]:
        if self._receiver is None:
            self._receiver = asyncio.create_task(self._receive())
        request_id = request_id or uuid.uuid4().hex
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        packed = msgpack.packb(payload, use_bin_type=True)
        await self.socket.send_multipart([request_id.encode(), method.encode(), packed])
        try:
            reply: dict[str, Any] = msgpack.unpackb(await asyncio.wait_for(future, timeout_s))
        finally:
            self._pending.pop(request_id, None)
        if not reply.get("success"):
            raise EnvServerError(reply.get("error") or "env server request failed")
        return reply

    async def run(
        self,
        base_url: str,
        model: str,
        sampling: dict[str, Any],
        task_data: dict[str, Any],
        timeout_s: float = 120.0,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        payload = {
            "task_data": task_data,
            "client": {"type": "train", "base_url": base_url, "api_key_var": "NONE"},
            "model": model,
            "sampling": sampling,
        }
        episode: dict[str, Any] = (await self.request("run", payload, timeout_s, request_id))[
            "episode"
        ]
        check_episode(episode)
        return episode

    async def close(self) -> None:
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        self.socket.close()
        self.ctx.term()


def check_episode(episode: dict[str, Any]) -> None:
    """The shape the verifiers v1 models declare; `AssertionError` naming what breaks it."""
    for key in ("id", "env", "task", "ok", "errors", "traces"):
        assert key in episode, f"episode lacks {key}"
    assert set(episode["task"]) >= {"type", "data"}
    for error in episode["errors"]:
        assert isinstance(error["type"], str) and isinstance(error["message"], str)
    for trace in episode["traces"]:
        assert set(trace["agent"]) >= {"config", "name", "trainable"}
        for name, reward in trace["rewards"].items():
            assert reward is None or isinstance(reward["score"], float), name
        for index, node in enumerate(trace["nodes"]):
            assert node["message"]["role"] in ROLES
            assert node["parent"] is None or 0 <= node["parent"] < index
            assert len(node["mask"]) == len(node["token_ids"])
            assert len(node["logprobs"]) in (0, sum(node["mask"]))


def reward(trace: dict[str, Any]) -> float:
    """`Trace.reward`."""
    return sum(r["score"] * r.get("weight", 1.0) for r in trace["rewards"].values() if r)


def num_turns(trace: dict[str, Any]) -> int:
    return sum(1 for node in trace["nodes"] if node.get("sampled"))


def branch(trace: dict[str, Any]) -> tuple[list[int], list[bool], list[float]]:
    """The one branch of a linear trace: `Branch.token_ids`, `sampled_mask` and `logprobs`
    (node logprobs spread onto their sampled positions, 0.0 elsewhere)."""
    children = {node["parent"] for node in trace["nodes"]}
    leaves = [i for i in range(len(trace["nodes"])) if i not in children]
    assert len(leaves) == 1, f"expected one branch, got leaves {leaves}"
    path: list[int] = []
    at: int | None = leaves[0]
    while at is not None:
        path.append(at)
        at = trace["nodes"][at]["parent"]
    tokens: list[int] = []
    mask: list[bool] = []
    logprobs: list[float] = []
    for node in (trace["nodes"][i] for i in reversed(path)):
        tokens += node["token_ids"]
        mask += node["mask"]
        values = iter(node["logprobs"])
        logprobs += [next(values, 0.0) if sampled else 0.0 for sampled in node["mask"]]
    return tokens, mask, logprobs
