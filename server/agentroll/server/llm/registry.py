"""Backend clients by kind: `make_client("vllm" | "sglang", base_url, model, http)`.

Built-in kinds name their client class by import path, imported on first use. Other kinds
can be added with `register_client_kind`; a kind claimed twice is an error, never a silent
override, and an unknown kind is refused with the known ones named.
"""

import importlib
from typing import Protocol, cast

from agentroll.server.errors import ServerError
from agentroll.server.llm.base import BackendClient, ChatTokenizer
from agentroll.server.llm.http import HTTPClient
from agentroll.server.schema import BackendKind

BUILTIN_CLIENT_KINDS: dict[str, str] = {
    BackendKind.vllm.value: "agentroll.server.llm.vllm:VLLMClient",
    BackendKind.sglang.value: "agentroll.server.llm.sglang:SGLangClient",
}


class ClientFactory(Protocol):
    """Builds a client of one kind (a client class is one)."""

    def __call__(
        self,
        base_url: str,
        model: str | None,
        http: HTTPClient,
        *,
        tokenizer: ChatTokenizer | None = None,
    ) -> BackendClient: ...


class BackendKindError(ServerError, LookupError):
    pass


class UnknownBackendKind(BackendKindError, ValueError):
    def __init__(self, kind: str, known: list[str]) -> None:
        super().__init__(f"unknown backend kind {kind!r}; known: {', '.join(known)}")
        self.kind = kind
        self.known = known


class DuplicateBackendKind(BackendKindError, ValueError):
    pass


_registered: dict[str, ClientFactory] = {}


def client_kinds() -> list[str]:
    return sorted({*BUILTIN_CLIENT_KINDS, *_registered})


def register_client_kind(kind: str, factory: ClientFactory) -> None:
    if kind in _registered or kind in BUILTIN_CLIENT_KINDS:
        raise DuplicateBackendKind(f"backend kind {kind!r} is already registered")
    _registered[kind] = factory


def _factory(kind: str) -> ClientFactory:
    if kind in _registered:
        return _registered[kind]
    path = BUILTIN_CLIENT_KINDS.get(kind)
    if path is None:
        raise UnknownBackendKind(kind, client_kinds())
    module, _, name = path.partition(":")
    return cast(ClientFactory, getattr(importlib.import_module(module), name))


def make_client(
    kind: str,
    base_url: str,
    model: str | None,
    http: HTTPClient,
    *,
    tokenizer: ChatTokenizer | None = None,
) -> BackendClient:
    """A client for `kind` (a `BackendKind` works too: it is a str)."""
    return _factory(str(kind))(base_url, model, http, tokenizer=tokenizer)
