"""Fixtures for the scripted LLM backend: in-process apps over httpx's ASGI transport."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest

from agentroll.testing.scripted_llm import ScriptedLLMConfig, create_app, get_chat_template
from agentroll.testing.scripted_llm.engine import Engine

Client = tuple[httpx.AsyncClient, Engine]
ClientFactory = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def scripted() -> ClientFactory:
    """`async with scripted(version="0.2x", latency_s=1) as (client, engine)`."""

    @asynccontextmanager
    async def start(**config: Any) -> AsyncIterator[Client]:
        app = create_app(ScriptedLLMConfig(**config))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://scripted", timeout=30
        ) as client:
            yield client, app.state.engine

    return start


@pytest.fixture
def chat_ids() -> Callable[[str], list[int]]:
    """Prompt ids for one user message plus the generation prompt."""

    def build(content: str) -> list[int]:
        messages = [{"role": "user", "content": content}]
        return get_chat_template().encode(messages, add_generation_prompt=True)

    return build
