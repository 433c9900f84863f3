"""Right labels from the token session: gate on every try, turns, logprobs, tokenizer identity."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentroll.handlers import LLMUnavailable, Message, UnservableRequest, classify_error
from agentroll.server.llm import BackendPool, TokenSession
from agentroll.server.llm.base import BackendError, BackendPaused, Completion, TokenizeResult
from agentroll.server.llm.gate import GenerationGate
from agentroll.server.llm.http import HTTPClient, HTTPResponse
from agentroll.server.llm.vllm import VLLMClient
from agentroll.server.schema import BackendSpec
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app

MESSAGES: list[Message] = [{"role": "user", "content": "hi"}]


class FakeClient:
    """A backend whose tokenizer is named by `vocab` and whose completions are scripted."""

    def __init__(self, vocab: int, replies: list[Completion | BaseException] | None = None):
        self.base_url = f"http://fake-{vocab}"
        self.model: str | None = None
        self.vocab = vocab
        self.vocabulary: int | None = None  # no tokenizer given: ids need only fit 31 bits
        self.replies = list(replies or [])
        self.calls = 0
        self.hold: asyncio.Event | None = None

    async def tokenize_messages(self, messages: Any, tools: Any, **_: Any) -> TokenizeResult:
        return TokenizeResult([self.vocab, self.vocab + 1, len(messages)], 1000)

    async def vocab_size(self) -> int | None:
        return self.vocabulary

    async def logprobs_mode(self, *, timeout_s: float = 10.0) -> None:
        return None

    async def complete(
        self, prompt_ids: list[int], sampling: Any, *, timeout_s: float, routing_from: Any = None
    ) -> Any:
        self.calls += 1
        if self.hold is not None:
            await self.hold.wait()
        reply = self.replies.pop(0) if self.replies else _done([7, 8])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def pause(self, mode: str = "wait", *, timeout_s: float = 300.0) -> None: ...

    async def resume(self, *, timeout_s: float = 60.0) -> None: ...


def _done(ids: list[int], finish: str = "stop") -> Completion:
    return Completion(ids, [-0.5] * len(ids), "x" * len(ids), finish, 3)


@pytest.fixture
async def pool() -> AsyncIterator[BackendPool]:
    http = HTTPClient()
    yield BackendPool(http)
    await http.close()


def add(pool: BackendPool, backend_id: str, client: FakeClient, **spec: Any) -> None:
    backend, _ = pool.add(BackendSpec(id=backend_id, base_url=client.base_url, **spec))
    backend.client = client


def session(pool: BackendPool, gate: GenerationGate, **kwargs: Any) -> TokenSession:
    options: dict[str, Any] = {"max_response_tokens": 100, "max_context_tokens": None}
    options.update(kwargs)
    return TokenSession(pool, sampling={}, gate=gate, request_timeout_s=5.0, **options)


async def test_a_retry_on_another_backend_waits_at_the_gate(pool: BackendPool) -> None:
    first = FakeClient(100, [BackendError("503 overloaded", retryable=True, status=503)])
    first.hold = asyncio.Event()
    second = FakeClient(100)
    add(pool, "a", first)
    add(pool, "b", second)
    gate = GenerationGate()
    s = session(pool, gate)
    await s.start(MESSAGES)
    turn = asyncio.create_task(s.generate())
    while first.calls == 0:
        await asyncio.sleep(0.001)
    gate.close("wait")  # a weight sync starts while the first try is in flight
    first.hold.set()  # ...and the first try fails
    while not s.retries:
        await asyncio.sleep(0.001)
    for _ in range(20):
        await asyncio.sleep(0)
    assert second.calls == 0  # the retry did not reach a backend while paused
    assert gate.in_flight == 0  # and the pause can complete
    gate.open(1)
    result = await asyncio.wait_for(turn, 5)
    assert second.calls == 1 and result.policy_version == 1  # sampled under the new version


async def test_a_turn_split_by_a_pause_counts_once(pool: BackendPool) -> None:
    client = FakeClient(100, [_done([5], "abort"), _done([6, 9])])
    add(pool, "a", client)
    s = session(pool, GenerationGate())
    await s.start(MESSAGES)
    turn = await s.generate()
    assert turn.token_ids == (5, 6, 9) and len(s.segments) == 2
    assert s.num_turns == 1


async def test_the_first_prompt_cache_is_keyed_by_the_tokenizer(pool: BackendPool) -> None:
    add(pool, "m1", FakeClient(100), model="model-one", tags=["one"])
    add(pool, "m2", FakeClient(200), model="model-two", tags=["two"])
    gate = GenerationGate()
    first = session(pool, gate, tags=frozenset({"one"}))
    await first.start(MESSAGES)
    second = session(pool, gate, tags=frozenset({"two"}))
    await second.start(MESSAGES)  # same conversation, another model's tokenizer
    assert first.prompt_ids == [100, 101, 1]
    assert second.prompt_ids == [200, 201, 1]


async def test_a_session_never_generates_on_a_backend_with_another_tokenizer(
    pool: BackendPool,
) -> None:
    add(pool, "m1", FakeClient(100), model="model-one")
    other = FakeClient(200)
    add(pool, "m2", other, model="model-two")
    s = session(pool, GenerationGate())
    await s.start(MESSAGES)
    pool.get("m1").healthy = False  # type: ignore[union-attr]
    with pytest.raises(LLMUnavailable):
        await s.generate()  # its tokens would be another model's: refuse, never mix
    assert other.calls == 0


class _OneResponse:
    def __init__(self, body: Any) -> None:
        self.body = body

    async def request(self, *_: Any, **__: Any) -> HTTPResponse:
        return HTTPResponse(200, self.body)


@pytest.mark.parametrize(
    "logprobs",
    [None, {"token_logprobs": [-0.1, None]}, {"token_logprobs": [-0.1]}],
    ids=["absent", "a-null", "too-few"],
)
async def test_missing_logprobs_are_an_error_never_zero(logprobs: Any) -> None:
    body = {
        "choices": [
            {
                "text": "ab",
                "token_ids": [1, 2],
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
        ],
        "usage": {"prompt_tokens": 3},
    }
    client = VLLMClient("http://vllm", None, _OneResponse(body))  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="logprob") as caught:
        await client.complete([1, 2, 3], {"max_tokens": 2}, timeout_s=5)
    assert not caught.value.retryable


async def test_a_slow_backend_that_times_out_is_not_marked_down(pool: BackendPool) -> None:
    slow = await start_in_loop(create_scripted_app(ScriptedLLMConfig(latency_s=2.0)))
    try:
        backend, _ = pool.add(BackendSpec(id="slow", base_url=slow.url))
        s = session(pool, GenerationGate())
        s._timeout = 0.3
        await s.start(MESSAGES)
        with pytest.raises(LLMUnavailable, match="timed out"):
            await s.generate()
        assert backend.healthy  # slow is not down: health probes decide that
    finally:
        await slow.stop()


async def test_a_backend_paused_outside_the_gate_is_waited_out(pool: BackendPool) -> None:
    paused = BackendPaused("503: generation is paused")
    client = FakeClient(100, [paused, paused, _done([4, 2])])
    add(pool, "a", client)
    s = session(pool, GenerationGate(), backend_wait_s=30.0)
    await s.start(MESSAGES)
    turn = await asyncio.wait_for(s.generate(), 30)
    assert turn.token_ids == (4, 2) and client.calls == 3
    assert s.retries == []  # waiting for a paused engine is not a failed try


async def test_a_backend_that_stays_paused_ends_the_call_after_the_wait(
    pool: BackendPool,
) -> None:
    client = FakeClient(100, [BackendPaused("503: generation is paused")] * 100)
    add(pool, "a", client)
    s = session(pool, GenerationGate(), backend_wait_s=0.6)
    await s.start(MESSAGES)
    with pytest.raises(LLMUnavailable) as caught:
        await asyncio.wait_for(s.generate(), 30)
    assert caught.value.cause == "llm_backend_paused"


@pytest.mark.parametrize("sampled", [[-1], [50], [True], [2**63]], ids=str)
async def test_ids_a_backend_sampled_outside_the_vocabulary_are_never_sent_back(
    pool: BackendPool, sampled: list[Any]
) -> None:
    """A model may sample an id its tokenizer lacks (embeddings padded past the vocabulary);
    a broken engine may answer anything. The next turn's prompt holds it: refused before any
    backend sees it, as the policy's doing (`agent_error`), not retried elsewhere."""
    # A pause splits the turn: its rest is sampled from prompt + the ids sampled so far.
    first, second = FakeClient(10, [_done(sampled, "abort")]), FakeClient(10)
    first.vocabulary = second.vocabulary = 50
    add(pool, "a", first)
    add(pool, "b", second)
    s = session(pool, GenerationGate())
    await s.start(MESSAGES)
    with pytest.raises(UnservableRequest, match="is not a token id of this model") as caught:
        await s.generate()
    assert (first.calls, second.calls) == (1, 0) and s.retries == []
    decision = classify_error("run", caught.value)
    assert (decision.outcome, decision.evaluate) == ("agent_error", True)


async def test_a_connection_dropped_after_a_shaped_request_quarantines_the_request_not_the_backend(
    pool: BackendPool,
) -> None:
    """The engine drops the connection right after a prompt holding the policy's tokens,
    serves the control, and drops the prompt again: the request is the policy's doing, no
    other backend gets it, and the backend stays in service (the drop had marked it down)."""
    dropped = BackendError("connection reset", retryable=True)
    first = FakeClient(10, [_done([5], "abort"), dropped, _done([1]), dropped])
    second = FakeClient(10)
    add(pool, "a", first)
    add(pool, "b", second)
    s = session(pool, GenerationGate())
    await s.start(MESSAGES)
    with pytest.raises(UnservableRequest, match="served a control request"):
        await s.generate()
    # Turn start, the dropped one, the control, the dropped one once more.
    assert (first.calls, second.calls) == (4, 0)
    assert pool.get("a").healthy  # type: ignore[union-attr]
    with pytest.raises(UnservableRequest, match="it is not sent again"):
        await s.generate()  # the same prompt again: refused before any backend
    assert (first.calls, second.calls) == (4, 0)


async def test_a_control_refused_by_an_outside_pause_is_waited_out(pool: BackendPool) -> None:
    """An engine paused outside the gate (another trainer process syncing weights) refuses the
    control: that decides nothing, it is waited out as any call's pause is, and a backend
    that then serves the control and the request is blamed for nothing."""
    dropped = BackendError("connection reset", retryable=True)
    paused = BackendPaused("503: generation is paused")
    first = FakeClient(10, [_done([5], "abort"), dropped, paused, _done([1]), _done([4, 2])])
    second = FakeClient(10)
    add(pool, "a", first)
    add(pool, "b", second)
    s = session(pool, GenerationGate(), backend_wait_s=30.0)
    await s.start(MESSAGES)
    turn = await asyncio.wait_for(s.generate(), 30)
    assert turn.token_ids == (5, 4, 2)
    # Turn start, the dropped one, the refused control, the control, the request once more.
    assert (first.calls, second.calls) == (5, 0)
