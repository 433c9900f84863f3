"""A backend's logprobs mode: the server's own word wins over a registration, and routing
for a job that requires a mode uses only what is known."""

import pytest

from agentroll.handlers import LLMUnavailable
from agentroll.server.llm.backend_pool import Backend, BackendPool
from agentroll.server.llm.base import BackendError
from agentroll.server.llm.http import HTTPClient
from agentroll.server.schema import BackendSpec


class Server:
    """Answers `logprobs_mode()` as a vLLM server would: its mode, or None outside dev mode."""

    def __init__(self, mode: str | None, *, reachable: bool = True) -> None:
        self.mode = mode
        self.reachable = reachable
        self.asked = 0

    async def logprobs_mode(self, *, timeout_s: float = 10.0) -> str | None:
        self.asked += 1
        if not self.reachable:
            raise BackendError("connection refused", retryable=True, status=None)
        return self.mode


def backend(declared: str | None, server: Server, backend_id: str = "b") -> Backend:
    spec = BackendSpec(id=backend_id, base_url="http://h:1", logprobs_mode=declared)
    return Backend(backend_id, spec, server)  # type: ignore[arg-type]


async def test_a_server_that_could_not_be_asked_is_asked_again_and_its_answer_wins() -> None:
    server = Server("raw_logprobs", reachable=False)
    b = backend("processed_logprobs", server)
    await b.learn_logprobs_mode()
    assert b.logprobs_mode == "processed_logprobs"  # the declaration, until the server says
    server.reachable = True
    with pytest.raises(ValueError, match="server runs --logprobs-mode raw_logprobs"):
        await b.learn_logprobs_mode()
    assert b.logprobs_mode == "raw_logprobs"
    await b.learn_logprobs_mode()
    assert server.asked == 2  # once answered, never asked again


@pytest.mark.parametrize(
    ("declared", "told", "mode"),
    [
        (None, None, None),
        ("raw_logprobs", None, "raw_logprobs"),
        (None, "raw_logits", "raw_logits"),
    ],
)
async def test_the_mode_is_what_someone_said_never_a_default(
    declared: str | None, told: str | None, mode: str | None
) -> None:
    b = backend(declared, Server(told))
    await b.learn_logprobs_mode()
    assert b.logprobs_mode == mode


async def test_routing_for_a_required_mode_names_what_the_fleet_gives() -> None:
    pool = BackendPool(HTTPClient())
    for b in (backend(None, Server("raw_logprobs"), "r"), backend(None, Server(None), "u")):
        await b.learn_logprobs_mode()
        pool._backends[b.id] = b
    assert pool.choose(frozenset(), None, logprobs_mode="raw_logprobs").id == "r"
    with pytest.raises(LLMUnavailable, match="gives processed_logprobs") as caught:
        pool.choose(frozenset(), None, logprobs_mode="processed_logprobs")
    assert caught.value.cause == "logprobs_mode_unavailable"
    assert "None, raw_logprobs" in str(caught.value)  # the unknown one is named as unknown


async def test_an_answer_that_cannot_be_read_is_not_asked_for_again() -> None:
    class Garbled(Server):
        async def logprobs_mode(self, *, timeout_s: float = 10.0) -> str | None:
            self.asked += 1
            raise BackendError("/server_info has no model_config.logprobs_mode", retryable=False)

    server = Garbled(None)
    b = backend("raw_logprobs", server)
    await b.learn_logprobs_mode()
    await b.learn_logprobs_mode()
    assert (server.asked, b.logprobs_mode) == (1, "raw_logprobs")  # the declaration stands
