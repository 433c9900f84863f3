"""The vLLM and SGLang clients against the scripted backend in every protocol variant, over
real sockets: ids/logprobs equal what the backend logged, finish reasons, context-length
errors, version detection and pause/resume per version."""

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers import ContextLengthExceeded
from agentroll.server.llm import registry
from agentroll.server.llm.base import BackendClient, BackendError, BackendPaused, PauseUnsupported
from agentroll.server.llm.http import HTTPClient
from agentroll.server.llm.registry import DuplicateBackendKind, UnknownBackendKind, make_client
from agentroll.server.llm.sglang import SGLangClient, sglang_sampling
from agentroll.server.llm.vllm import VLLMClient
from agentroll.server.serving import start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig, create_app, get_chat_template
from agentroll.testing.scripted_llm.engine import Engine
from agentroll.testing.scripted_llm.export import export_tokenizer

pytestmark = pytest.mark.timeout(60)

VARIANTS: dict[str, dict[str, Any]] = {
    "vllm-0.11": {"version": "0.11"},
    "vllm-0.14": {"version": "0.2x", "release": "0.14.0"},
    "vllm-0.26": {"version": "0.2x"},
    "vllm-0.33": {"version": "0.33"},
    "sglang-0.5.2": {"flavor": "sglang", "sglang_version": "0.5.2"},
    "sglang-0.5.23": {"flavor": "sglang", "sglang_version": "0.5.23"},
}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "seed": 3}
REPEAT = "Repeat after me: the quick brown fox jumps over the lazy dog, twice."


class Backend:
    def __init__(self, client: BackendClient, url: str, engine: Engine, http: HTTPClient):
        self.client, self.url, self.engine, self.http = client, url, engine, http

    async def log(self) -> list[dict[str, Any]]:
        r = await self.http.request("GET", self.url + "/scripted/requests", timeout_s=10)
        entries: list[dict[str, Any]] = r.body["requests"]
        return entries

    async def post(self, path: str, body: Any = None) -> Any:
        return await self.http.request("POST", self.url + path, json_body=body, timeout_s=10)


Start = Callable[..., AbstractAsyncContextManager[Backend]]


@pytest.fixture
def tokenizer_dir(tmp_path: Path) -> Path:
    return export_tokenizer(tmp_path / "tokenizer")


@pytest.fixture
def backend(tokenizer_dir: Path) -> Start:
    """`async with backend("vllm-0.33", latency_s=1) as b` -> client on a real socket."""

    @asynccontextmanager
    async def start(variant: str, **extra: Any) -> AsyncIterator[Backend]:
        config = {"policy": ["echo"], **VARIANTS[variant], **extra}
        if variant == "sglang-0.5.2":  # no /tokenize: the client loads the server's files
            config.setdefault("tokenizer_path", str(tokenizer_dir))
        app = create_app(ScriptedLLMConfig(**config))
        running = await start_in_loop(app)
        http = HTTPClient(timeout_s=30)
        kind = "sglang" if variant.startswith("sglang") else "vllm"
        try:
            client = make_client(kind, running.url, "policy", http)
            yield Backend(client, running.url, app.state.engine, http)
        finally:
            await http.close()
            await running.stop()

    return start


def chat(content: str = REPEAT) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_completion_is_exactly_what_the_backend_sampled(backend: Start, variant: str):
    async with backend(variant) as b:
        prompt = await b.client.tokenize_messages(chat(), None, add_generation_prompt=True)
        done = await b.client.complete(
            prompt.token_ids, {**SAMPLING, "max_tokens": 200}, timeout_s=10
        )
        (logged,) = await b.log()
    assert prompt.token_ids == get_chat_template().encode(chat(), add_generation_prompt=True)
    assert logged["prompt_token_ids"] == prompt.token_ids
    assert done.token_ids == logged["token_ids"]
    assert done.logprobs == logged["logprobs"]  # JSON floats round-trip exactly
    assert done.text == logged["text"] == "the quick brown fox jumps over the lazy dog, twice."
    assert done.finish_reason == "stop"
    assert done.token_ids[-1] == b.engine.tokenizer.eos_token_id
    assert done.prompt_tokens == len(prompt.token_ids)


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_length_finish_keeps_every_sampled_id(backend: Start, variant: str):
    async with backend(variant) as b:
        prompt = await b.client.tokenize_messages(chat(), None, add_generation_prompt=True)
        done = await b.client.complete(
            prompt.token_ids, {**SAMPLING, "max_tokens": 4}, timeout_s=10
        )
        (logged,) = await b.log()
    assert (done.finish_reason, len(done.token_ids)) == ("length", 4)
    assert done.token_ids == logged["token_ids"]


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_prompt_longer_than_the_context_is_context_length_exceeded(
    backend: Start, variant: str
):
    async with backend(variant, max_model_len=64) as b:
        with pytest.raises(ContextLengthExceeded):
            await b.client.complete([100] * 70, {**SAMPLING, "max_tokens": 4}, timeout_s=10)


@pytest.mark.parametrize(
    ("variant", "wording"),
    [
        ("vllm-0.11", "maximum context length is 34 tokens"),  # 0.11 prints the input budget
        ("vllm-0.14", "you requested 30 output tokens"),
        ("vllm-0.26", "you requested 30 output tokens"),
        ("sglang-0.5.2", "You requested a total of 90 tokens"),
        ("sglang-0.5.23", "You requested a total of 90 tokens"),
    ],
)
async def test_prompt_plus_max_tokens_over_the_context_is_refused(
    backend: Start, variant: str, wording: str
):
    async with backend(variant, max_model_len=64) as b:
        with pytest.raises(ContextLengthExceeded, match=wording):
            await b.client.complete([100] * 60, {**SAMPLING, "max_tokens": 30}, timeout_s=10)


async def test_sglang_client_leaves_the_position_sglang_keeps_free(backend: Start):
    async with backend("sglang-0.5.23", max_model_len=64) as b:
        done = await b.client.complete(
            [100] * 60, {**SAMPLING, "max_tokens": 4, "ignore_eos": True}, timeout_s=10
        )
    assert (done.finish_reason, len(done.token_ids)) == ("length", 3)


async def test_033_clamps_max_tokens_and_refuses_more_than_the_context(backend: Start):
    async with backend("vllm-0.33", max_model_len=64) as b:
        done = await b.client.complete(
            [100] * 60, {**SAMPLING, "max_tokens": 30, "ignore_eos": True}, timeout_s=10
        )
        with pytest.raises(ContextLengthExceeded, match="cannot be greater than max_model_len"):
            await b.client.complete([100] * 10, {**SAMPLING, "max_tokens": 65}, timeout_s=10)
        with pytest.raises(ContextLengthExceeded, match="at least 1"):
            await b.client.complete([100] * 64, {**SAMPLING, "max_tokens": 4}, timeout_s=10)
    assert (done.finish_reason, len(done.token_ids)) == ("length", 4)


@pytest.mark.parametrize(
    ("variant", "family", "release"),
    [
        ("vllm-0.11", "0.11", (0, 11, 0)),
        ("vllm-0.14", "0.2x", (0, 14, 0)),
        ("vllm-0.26", "0.2x", (0, 26, 0)),
        ("vllm-0.33", "0.33", (0, 33, 0)),
    ],
)
async def test_vllm_version_detection(backend: Start, variant: str, family: str, release: Any):
    async with backend(variant) as b:
        assert isinstance(b.client, VLLMClient)
        assert await b.client.detect() == family
        assert b.client.release == release


@pytest.mark.parametrize("variant", ["sglang-0.5.2", "sglang-0.5.23"])
async def test_sglang_version_detection(backend: Start, variant: str):
    async with backend(variant) as b:
        assert isinstance(b.client, SGLangClient)
        assert await b.client.detect() == variant.removeprefix("sglang-")
        assert b.client.model_info["weight_version"] == "0"
        # 0.5.23 reports its context length through /tokenize; 0.5.2 has no way to
        assert b.client.max_model_len == (8192 if variant.endswith("23") else None)


# -- pause / resume ------------------------------------------------------------------------


async def _in_flight(b: Backend, max_tokens: int = 200) -> "asyncio.Task[Any]":
    prompt = await b.client.tokenize_messages(chat(), None, add_generation_prompt=True)
    task = asyncio.create_task(
        b.client.complete(prompt.token_ids, {**SAMPLING, "max_tokens": max_tokens}, timeout_s=30)
    )
    await until(lambda: any(b.engine.progress(r) > 0.3 for r in b.engine.running))
    return task


async def test_vllm_011_has_no_pause(backend: Start):
    async with backend("vllm-0.11") as b:
        with pytest.raises(PauseUnsupported, match="no /pause"):
            await b.client.pause("abort")
        with pytest.raises(PauseUnsupported):
            await b.client.resume()


@pytest.mark.parametrize("variant", ["vllm-0.14", "vllm-0.26", "vllm-0.33", "sglang-0.5.23"])
async def test_abort_returns_partial_tokens_as_logged(backend: Start, variant: str):
    async with backend(variant) as ref:  # same prompt and seed: the same sample, unhurried
        prompt = await ref.client.tokenize_messages(chat(), None, add_generation_prompt=True)
        full = await ref.client.complete(
            prompt.token_ids, {**SAMPLING, "max_tokens": 200}, timeout_s=5
        )
    async with backend(variant, latency_s=1.0) as b:
        task = await _in_flight(b)
        await b.client.pause("abort")
        partial = await task
        (logged,) = await b.log()
        await b.client.resume()
    assert partial.finish_reason == "abort"
    assert partial.token_ids == logged["token_ids"]
    assert partial.logprobs == logged["logprobs"]
    assert 0 < len(partial.token_ids) < len(full.token_ids)
    assert full.token_ids[: len(partial.token_ids)] == partial.token_ids
    assert full.finish_reason == "stop"


@pytest.mark.parametrize("variant", ["vllm-0.14", "vllm-0.26", "vllm-0.33"])
async def test_vllm_wait_pause_drains_in_flight_requests(backend: Start, variant: str):
    async with backend(variant, latency_s=0.5) as b:
        task = await _in_flight(b)
        await b.client.pause("wait")
        # pause returned only after the engine finished the request (its reply may still be
        # on the wire)
        assert not b.engine.running
        assert [e["finish_reason"] for e in await b.log()] == ["stop"]
        assert (await task).finish_reason == "stop"
        assert b.engine.paused
        await b.client.resume()
        assert not b.engine.paused


@pytest.mark.parametrize("variant", ["vllm-0.26", "vllm-0.33", "sglang-0.5.23"])
async def test_keep_pause_freezes_and_resume_continues(backend: Start, variant: str):
    async with backend(variant, latency_s=0.5) as b:
        task = await _in_flight(b)
        await b.client.pause("keep")
        progress = [b.engine.progress(r) for r in b.engine.running]
        await asyncio.sleep(0.6)  # longer than the whole request would take unpaused
        assert not task.done()
        assert [b.engine.progress(r) for r in b.engine.running] == progress
        await b.client.resume()
        done = await task
    assert done.finish_reason == "stop"


async def test_033_refuses_new_requests_while_paused_as_retryable(backend: Start):
    async with backend("vllm-0.33") as b:
        prompt = await b.client.tokenize_messages(chat(), None, add_generation_prompt=True)
        await b.client.pause("abort")
        with pytest.raises(BackendPaused) as caught:
            await b.client.complete(prompt.token_ids, {**SAMPLING, "max_tokens": 8}, timeout_s=5)
        await b.client.resume()
        after = await b.client.complete(
            prompt.token_ids, {**SAMPLING, "max_tokens": 8}, timeout_s=5
        )
    assert (caught.value.retryable, caught.value.status) == (True, 503)
    assert len(after.token_ids) == 8


@pytest.mark.parametrize("variant", ["vllm-0.26", "sglang-0.5.23"])
async def test_requests_sent_while_paused_are_held_until_resume(backend: Start, variant: str):
    async with backend(variant) as b:
        prompt = await b.client.tokenize_messages(chat(), None, add_generation_prompt=True)
        await b.client.pause("keep")
        task = asyncio.create_task(
            b.client.complete(prompt.token_ids, {**SAMPLING, "max_tokens": 8}, timeout_s=10)
        )
        await until(lambda: b.engine.waiting == 1)
        assert not task.done()
        await b.client.resume()
        done = await task
    assert len(done.token_ids) == 8


async def test_vllm_014_has_no_keep_mode(backend: Start):
    async with backend("vllm-0.14") as b:
        with pytest.raises(PauseUnsupported, match="keep"):
            await b.client.pause("keep")
        assert not b.engine.paused


async def test_sglang_pause_modes_without_an_equivalent_are_refused(backend: Start):
    async with backend("sglang-0.5.23") as b:
        with pytest.raises(PauseUnsupported, match="no 'wait' pause"):
            await b.client.pause("wait")
    async with backend("sglang-0.5.2", latency_s=1.0) as b:
        with pytest.raises(PauseUnsupported, match="only pause by aborting"):
            await b.client.pause("keep")
        task = await _in_flight(b)
        await b.client.pause("abort")
        assert (await task).finish_reason == "abort"
        assert b.engine.paused
        await b.client.resume()
        assert not b.engine.paused


async def test_033_reports_weight_version_ranges(backend: Start):
    async with backend("vllm-0.33", latency_s=0.5) as b:
        task = await _in_flight(b)
        await b.client.pause("keep")
        await b.post("/update_weight_version", {"new_version": "7"})
        await b.client.resume()
        done = await task
    assert done.weight_versions is not None
    (old, new) = done.weight_versions
    assert (old[0], old[1], new[0], new[2]) == ("0", 0, "7", len(done.token_ids))
    assert old[2] == new[1] > 0


async def test_older_vllm_reports_no_weight_versions(backend: Start):
    async with backend("vllm-0.26") as b:
        done = await b.client.complete([100, 101, 102], {**SAMPLING, "max_tokens": 4}, timeout_s=5)
    assert done.weight_versions is None


# -- SGLang template deltas ----------------------------------------------------------------

TOOL_CHAT = [
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"c": 1}'}}
        ],
    },
    {"role": "tool", "content": "a.txt\nb.txt", "tool_call_id": "c1", "name": "bash"},
    {"role": "assistant", "content": "ok"},
]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


async def test_sglang_052_renders_deltas_with_the_servers_tokenizer_files(backend: Start):
    template = get_chat_template()
    async with backend("sglang-0.5.2") as b:
        opened = await b.client.tokenize_messages(
            TOOL_CHAT, TOOLS, add_generation_prompt=False, continue_final_message=True
        )
        closed = await b.client.tokenize_messages(TOOL_CHAT, TOOLS, add_generation_prompt=False)
    assert opened.token_ids == template.encode(TOOL_CHAT, TOOLS, False, True)
    assert closed.token_ids == template.encode(TOOL_CHAT, TOOLS, False, False)
    closing = closed.token_ids[len(opened.token_ids) :]
    assert template.tokenizer.decode(closing) == "<|im_end|>\n"


async def test_sglang_without_a_local_tokenizer(backend: Start):
    async with backend("sglang-0.5.23") as b:  # tokenizer_path is a name, not a directory
        plain = await b.client.tokenize_messages(TOOL_CHAT, TOOLS, add_generation_prompt=True)
        with pytest.raises(BackendError, match="no continue_final_message") as caught:
            await b.client.tokenize_messages(
                TOOL_CHAT, None, add_generation_prompt=False, continue_final_message=True
            )
    assert plain.token_ids == get_chat_template().encode(TOOL_CHAT, TOOLS, True)
    assert plain.max_model_len == 8192
    assert not caught.value.retryable
    async with backend("sglang-0.5.2", tokenizer_path="Qwen/Qwen2.5-7B-Instruct") as b:
        with pytest.raises(BackendError, match="no /tokenize"):
            await b.client.tokenize_messages(TOOL_CHAT, None, add_generation_prompt=True)


def test_sampling_translation_to_sglang_names():
    assert sglang_sampling({"max_tokens": 5, "seed": None, "stop": ["x"], "min_tokens": 1}) == {
        "max_new_tokens": 5,
        "stop": ["x"],
        "min_new_tokens": 1,
    }
    with pytest.raises(BackendError, match="'logprobs' has no SGLang equivalent"):
        sglang_sampling({"logprobs": 3})


def test_make_client_by_kind():
    http = HTTPClient()
    for kind in ("vllm", "sglang"):
        assert isinstance(make_client(kind, "http://h:1/", None, http), BackendClient)
    assert make_client("sglang", "http://h:1/", None, http).base_url == "http://h:1"
    with pytest.raises(ValueError, match="known: sglang, vllm"):
        make_client("tgi", "http://h:1", None, http)


def test_client_kinds_are_registered_once_and_unknown_ones_name_the_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process-wide table stays untouched.
    monkeypatch.setattr(registry, "_kinds", registry._kind_registry())
    http = HTTPClient()
    with pytest.raises(UnknownBackendKind) as unknown:
        make_client("tgi", "http://h:1", None, http)
    assert unknown.value.known == ["sglang", "vllm"]
    registry.register_client_kind("tgi", VLLMClient)
    assert isinstance(make_client("tgi", "http://h:1", None, http), VLLMClient)
    assert registry.client_kinds() == ["sglang", "tgi", "vllm"]
    for taken in ("tgi", "vllm"):
        with pytest.raises(DuplicateBackendKind, match=f"{taken!r} is already registered"):
            registry.register_client_kind(taken, VLLMClient)
