"""Backend clients by kind: `make_client("vllm" | "sglang", base_url, model, http)`.

Other kinds can be added with `register_client_kind` (duplicates are an error).
"""

from collections.abc import Callable

from agentroll.server.llm.base import BackendClient, ChatTokenizer
from agentroll.server.llm.http import HTTPClient

ClientFactory = Callable[[str, str | None, HTTPClient, ChatTokenizer | None], BackendClient]


def _vllm(
    base_url: str, model: str | None, http: HTTPClient, tokenizer: ChatTokenizer | None
) -> BackendClient:
    from agentroll.server.llm.vllm import VLLMClient

    return VLLMClient(base_url, model, http)  # vLLM renders templates itself (/tokenize)


def _sglang(
    base_url: str, model: str | None, http: HTTPClient, tokenizer: ChatTokenizer | None
) -> BackendClient:
    from agentroll.server.llm.sglang import SGLangClient

    return SGLangClient(base_url, model, http, tokenizer=tokenizer)


_FACTORIES: dict[str, ClientFactory] = {"vllm": _vllm, "sglang": _sglang}


def register_client_kind(kind: str, factory: ClientFactory) -> None:
    if kind in _FACTORIES:
        raise ValueError(f"backend kind {kind!r} is already registered")
    _FACTORIES[kind] = factory


def make_client(
    kind: str,
    base_url: str,
    model: str | None,
    http: HTTPClient,
    *,
    tokenizer: ChatTokenizer | None = None,
) -> BackendClient:
    """A client for `kind` (a `BackendKind` works too: it is a str)."""
    factory = _FACTORIES.get(str(kind))
    if factory is None:
        known = ", ".join(sorted(_FACTORIES))
        raise ValueError(f"unknown backend kind {kind!r}; known: {known}")
    return factory(base_url, model, http, tokenizer)
