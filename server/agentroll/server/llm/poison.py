"""Requests the policy shaped are judged before a backend sees them, and never twice after one
failed on them.

A harness's base URL and key sit in its environment, which the policy's shell inherits, so
whatever the policy writes can reach an engine: token ids outside the vocabulary, negative,
boolean or beyond 64 bits crash SGLang engines and make older vLLM answer 500. Two rules
contain such a request to the rollout that made it:

- `check_token_ids`: every prompt id is an exact `int` (never a bool), `0 <= id < vocab`
  (the backend's tokenizer decides `vocab`; with none known, ids must fit 31 bits, as every
  engine's id tensors do). A failing prompt is refused with `UnservableRequest` before it is
  sent; a backend's own 4xx refusal of a policy-shaped request is `UnservableRequest` too,
  if the backend serves a control request (refusing that as well, it refuses the job's own
  sampling, or everything: infra).
- `RequestQuarantine`: a backend that fails (5xx, or the connection drops) right after a
  policy-shaped request is never sent it by another backend: the request is remembered (by
  digest) and held back while a control request on the same backend decides the blame. The
  control failed too: the backend is broken (infra). Served: the request goes once more to
  that backend, which just showed it is alive; a failure that does not repeat (a hiccup) is
  nobody's and the request is served, one that repeats is the request's (the policy's doing),
  refused from then on, and the backend stays in service. One request costs one backend at
  most, never the fleet.
"""

import hashlib
import json
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentroll.handlers import UnservableRequest
from agentroll.server.llm.base import BackendClient, BackendError, BackendPaused
from agentroll.server.schema.messages import ChatMessage

MAX_TOKEN_ID = 2**31 - 1
"""The largest id any engine can hold (int32 id tensors) when the vocabulary is unknown."""
CONTROL_PROMPT = [0]
"""A generation control: one id every vocabulary has (sampled for one token)."""
CONTROL_CONVERSATION: list[ChatMessage] = [{"role": "user", "content": "ok"}]
"""A tokenization control: a conversation every chat template renders."""


@dataclass(frozen=True, slots=True)
class Shaped:
    """A request the policy shaped: its identity (computed only when needed: digesting a long
    prompt costs time), and the control request that tells a broken backend from a request a
    working backend fails on."""

    digest: Callable[[], str]
    control: Callable[[BackendClient], Awaitable[Any]]


def check_token_ids(ids: Sequence[Any], vocab_size: int | None) -> None:
    """Refuse a prompt a backend cannot take: `UnservableRequest` names the first bad id."""
    if not ids:
        raise UnservableRequest("the prompt holds no token ids")
    bound = vocab_size if vocab_size is not None else MAX_TOKEN_ID + 1
    for position, token in enumerate(ids):
        if type(token) is not int or not 0 <= token < bound:
            shown = json.dumps(token) if isinstance(token, bool) else repr(token)[:40]
            raise UnservableRequest(
                f"prompt[{position}] = {shown} is not a token id of this model "
                f"(an integer in [0, {bound}))"
            )


def failed_on_request(exc: BackendError) -> bool:
    """Whether a backend failed right after receiving the request: a 5xx (not a pause) or a
    dropped connection. A timeout is a slow backend, a backend nobody could connect to never
    got the request, and a malformed answer (not retryable) is the backend's own fault: none
    of these is the request's."""
    if isinstance(exc, BackendPaused) or exc.timed_out or not exc.sent:
        return False
    if exc.status is None:
        return exc.retryable
    return exc.status >= 500


def refused_request(exc: BackendError) -> bool:
    """Whether a backend answered that the request itself is wrong: token ids out of its
    vocabulary, a conversation its chat template refuses (a 4xx other than a missing route, a
    timeout or a rate limit, which are the backend's trouble)."""
    return exc.status is not None and 400 <= exc.status < 500 and exc.status not in (404, 408, 429)


def token_digest(ids: Sequence[int], *extra: Any) -> str:
    """A request's identity from its (checked) prompt ids and anything else it sends."""
    digest = hashlib.sha256(array("q", ids).tobytes())
    digest.update(json.dumps(extra, sort_keys=True).encode())
    return digest.hexdigest()


def json_digest(*parts: Any) -> str:
    """A request's identity from its JSON-able parts (messages, tools, flags)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class RequestQuarantine:
    """Digests of requests a backend failed on, LRU-bounded (one per backend pool)."""

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._digests: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._digests)

    def add(self, digest: str, backend_id: str) -> None:
        self._digests[digest] = backend_id
        self._digests.move_to_end(digest)
        while len(self._digests) > self._capacity:
            self._digests.popitem(last=False)

    def discard(self, digest: str) -> None:
        self._digests.pop(digest, None)

    def check(self, digest: str) -> None:
        """`UnservableRequest` when this request already failed a backend."""
        backend_id = self._digests.get(digest)
        if backend_id is not None:
            raise UnservableRequest(
                f"backend {backend_id} failed right after this request; it is not sent again"
            )
