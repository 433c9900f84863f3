"""The real engine lane: vLLM's CPU build serving a tiny model, one server per test session.

`make test` prepares the engine (`agentroll engine setup`) before it runs pytest, so here
a missing engine is a failure, never a skip. Fixtures other suites reuse:

- `engine_model_dir`: the model the session's engine serves. The tiny random-init model by
  default; `AGENTROLL_ENGINE_MODEL=DIR` serves another (a trained tiny policy).
- `vllm_engine`: the session's `VLLMServer` (prefix caching on, dev-mode routes).
- `engine_agentroll`: `async with engine_agentroll(registry=..., **settings) as (server,
  client)`: an in-process agentroll server with the engine registered as backend `vllm-cpu-0`.
"""

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.server.engine import EngineEnvironment
from agentroll.server.engine.vllm_server import VLLMServer
from agentroll.server.serving import RunningServer
from agentroll.testing.tiny_model import prepare_tiny_engine
from agentroll.trainer_clients import AsyncRolloutClient

MODEL_ENV = "AGENTROLL_ENGINE_MODEL"
BACKEND_ID = "vllm-cpu-0"

EngineAgentroll = Callable[
    ..., AbstractAsyncContextManager[tuple[RunningServer, AsyncRolloutClient]]
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def engine_prepared() -> tuple[EngineEnvironment, Path]:
    """The engine's environment and the tiny model (cached; made here if `make` did not)."""
    return asyncio.run(prepare_tiny_engine())


@pytest.fixture(scope="session")
def engine_model_dir(engine_prepared: tuple[EngineEnvironment, Path]) -> Path:
    override = os.environ.get(MODEL_ENV)
    return Path(override) if override else engine_prepared[1]


@pytest.fixture(scope="session")
def vllm_engine(
    engine_prepared: tuple[EngineEnvironment, Path],
    engine_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[VLLMServer]:
    log = tmp_path_factory.mktemp("vllm-engine") / "vllm.log"
    with VLLMServer(engine_prepared[0].python, engine_model_dir, log, nice=5) as engine:
        yield engine


@pytest.fixture
def engine_agentroll(
    agentroll_server: Callable[..., Any], vllm_engine: VLLMServer
) -> EngineAgentroll:
    @asynccontextmanager
    async def start(
        registry: HandlerRegistry | None = None, **settings: Any
    ) -> AsyncIterator[tuple[RunningServer, AsyncRolloutClient]]:
        async with agentroll_server(registry=registry, **settings) as (server, client):
            await client.add_backend({"id": BACKEND_ID, "base_url": vllm_engine.url})
            yield server, client

    return start
