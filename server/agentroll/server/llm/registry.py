"""Backend clients by kind: `make_client("vllm" | "sglang", base_url, model, http)`.

Kinds resolve through the plugin registry every plugin uses (`agentroll.handlers.plugins`):
built-in kinds name their client class by import path, imported on first use; others are
added with `register_client_kind`. A kind claimed twice is an error, never a silent override,
and an unknown kind is refused with the known ones named.
"""

from typing import Protocol, cast

from agentroll.handlers.plugins import PluginRegistry
from agentroll.server.errors import (
    BackendKindError,
    DuplicateBackendKind,
    UnknownBackendKind,
)
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


def _as_factory(obj: object, origin: str) -> ClientFactory:
    if not callable(obj):
        raise BackendKindError(f"{origin} is not a client class or factory: {obj!r}")
    return cast(ClientFactory, obj)


def _kind_registry() -> PluginRegistry[ClientFactory]:
    return PluginRegistry[ClientFactory](
        "backend kind",
        convert=_as_factory,
        unknown=UnknownBackendKind,
        duplicate=DuplicateBackendKind,
        builtins=BUILTIN_CLIENT_KINDS,
        load_error=BackendKindError,
    )


_kinds = _kind_registry()


def client_kinds() -> list[str]:
    return _kinds.names()


def register_client_kind(kind: str, factory: ClientFactory) -> None:
    _kinds.register(kind, factory)


def make_client(
    kind: str,
    base_url: str,
    model: str | None,
    http: HTTPClient,
    *,
    tokenizer: ChatTokenizer | None = None,
) -> BackendClient:
    """A client for `kind` (a `BackendKind` works too: it is a str)."""
    return _kinds.get(str(kind))(base_url, model, http, tokenizer=tokenizer)
