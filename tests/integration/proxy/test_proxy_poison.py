"""Poison requests: what a harness (the policy's shell holds its URL and key) sends that an
engine cannot take is contained to the rollout that sent it.

Two real scripted backends serve one policy. Token ids no engine should see never reach
either; a request a backend fails on right after receiving it is answered to the harness as
an error, is not retried on the other backend, and is never sent again; the proxy goes on
serving honest requests (the rollout is not `infra_error`). A backend that fails a control
request too is broken: that is infra, and still the request is not carried to the next one.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.proxy.proxy_support import Rig, client_for

from agentroll.handlers import UnservableRequest, classify_error
from agentroll.server.llm import BackendPool, HTTPClient
from agentroll.server.llm.gate import GenerationGate
from agentroll.server.proxy import RolloutProxy
from agentroll.server.schema import BackendSpec
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.scripted_llm.export import export_tokenizer
from agentroll.testing.scripted_llm.rules.redteam_poison import ENGINE_FAILURE_MARK, RULE_PATH
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer

pytestmark = pytest.mark.integration

VOCAB = get_tokenizer().vocab_size


@dataclass
class Fleet:
    rig: Rig
    first: RunningServer
    second: RunningServer

    async def received(self, server: RunningServer) -> list[Any]:
        """The prompt of every generation request `server` got, refused ones included."""
        async with httpx.AsyncClient(base_url=server.url) as http:
            return list((await http.get("/scripted/requests")).json()["received"])


@asynccontextmanager
async def fleet(tmp_path: Path, **first_config: Any) -> AsyncIterator[Fleet]:
    """Two backends of one model (the first may be configured to fail), with its tokenizer
    known to agentroll, so the vocabulary is."""
    tokenizer = str(export_tokenizer(tmp_path / "tokenizer"))
    async with AsyncExitStack() as stack:
        servers = []
        for config in ({"policy": [RULE_PATH, "echo"], **first_config}, {"policy": ["echo"]}):
            server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(**config)))
            stack.push_async_callback(server.stop)
            servers.append(server)
        http = HTTPClient()
        stack.push_async_callback(http.close)
        pool = BackendPool(http)
        for name, server in zip(("first", "second"), servers, strict=True):
            pool.add(BackendSpec(id=name, base_url=server.url, tokenizer_path=tokenizer))
        yield Fleet(Rig(servers[0], pool, GenerationGate()), *servers)


def say(text: str) -> dict[str, str]:
    return {"role": "user", "content": f"Repeat after me: {text}"}


async def post(proxy: RolloutProxy, api: str, text: str) -> httpx.Response:
    """One request carrying `text` as its user turn, in the wire format `api` names."""
    if api == "google":
        transport = httpx.AsyncHTTPTransport(uds=proxy.socket_path)
        headers = {"x-goog-api-key": proxy.api_key}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://rollout", headers=headers, timeout=30
        ) as http:
            part = {"text": say(text)["content"]}
            body: dict[str, Any] = {"contents": [{"role": "user", "parts": [part]}]}
            return await http.post("/v1beta/models/policy:generateContent", json=body)
    async with client_for(proxy) as http:
        if api == "anthropic":
            http.headers["x-api-key"] = proxy.api_key
            body = {"model": "policy", "max_tokens": 64, "messages": [say(text)]}
            return await http.post("/messages", json=body)
        if api == "responses":
            return await http.post("/responses", json={"model": "policy", "input": [say(text)]})
        if api == "completions":
            ids = get_tokenizer().encode(f"<|im_start|>user\n{say(text)['content']}<|im_end|>\n")
            return await http.post("/completions", json={"prompt": ids, "max_tokens": 32})
        return await http.post("/chat/completions", json={"messages": [say(text)]})


def error_text(resp: httpx.Response) -> str:
    body = resp.json()
    return str(body["error"]["message"] if isinstance(body.get("error"), dict) else body)


@pytest.mark.parametrize(
    "poison",
    [[-1], [VOCAB], [True], [2**63], [1.0], [5, -1, 7]],
    ids=["negative", "vocab", "boolean", "2**63", "float", "negative-inside"],
)
async def test_poison_token_ids_never_reach_a_backend(tmp_path: Path, poison: list[Any]) -> None:
    async with fleet(tmp_path, out_of_vocab="crash") as f:
        proxy = await f.rig.proxy(tmp_path)
        async with client_for(proxy) as http:
            refused = await http.post("/completions", json={"prompt": poison, "max_tokens": 8})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["type"] == "invalid_request_error"
            assert "is not a token id of this model" in error_text(refused)
        assert await f.received(f.first) == [] and await f.received(f.second) == []
        # The control: an honest token prompt right after is served, the proxy never stopped.
        served = await post(proxy, "completions", "one")
        assert served.status_code == 200, served.text
        assert served.json()["choices"][0]["text"] == "one"
        assert proxy.stopped is None
        await proxy.close()


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "anthropic", "google"])
async def test_a_request_a_backend_fails_on_is_the_harness_error_and_goes_nowhere_else(
    tmp_path: Path, api: str
) -> None:
    async with fleet(tmp_path) as f:
        proxy = await f.rig.proxy(tmp_path)
        failed = await post(proxy, api, f"poison {ENGINE_FAILURE_MARK}")
        assert failed.status_code == 502, failed.text
        assert "served a control request" in failed.text
        # The first backend got the request, a control, then the request once more (it failed
        # again: not a hiccup); the second never got it.
        first = await f.received(f.first)
        assert len(first) == 3 and first[1] == [0] and first[2] == first[0]
        assert await f.received(f.second) == []
        # Sent again (an SDK retries a 5xx), it is refused without reaching any backend.
        again = await post(proxy, api, f"poison {ENGINE_FAILURE_MARK}")
        assert again.status_code == 400, again.text
        assert "it is not sent again" in again.text
        assert len(await f.received(f.first)) == 3 and await f.received(f.second) == []
        # The rollout goes on: an honest call is served, and nothing was infra.
        served = await post(proxy, api, "two")
        assert served.status_code == 200, served.text
        assert proxy.stopped is None
        assert proxy.report()["refused"] == {"unservable": 2}
        await proxy.close()


async def test_a_backend_that_fails_a_control_too_is_infra_and_the_request_stays_put(
    tmp_path: Path,
) -> None:
    # SGLang's scheduler dies on an id beyond its vocabulary: with the vocabulary unknown to
    # agentroll, the request reaches the first backend, which fails the control as well.
    async with AsyncExitStack() as stack:
        servers = []
        for config in ({"out_of_vocab": "crash"}, {}):
            server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(**config)))
            stack.push_async_callback(server.stop)
            servers.append(server)
        http_client = HTTPClient()
        stack.push_async_callback(http_client.close)
        pool = BackendPool(http_client)
        for name, server in zip(("first", "second"), servers, strict=True):
            pool.add(BackendSpec(id=name, base_url=server.url))
        f = Fleet(Rig(servers[0], pool, GenerationGate()), *servers)
        proxy = await f.rig.proxy(tmp_path)
        async with client_for(proxy) as http:
            resp = await http.post("/completions", json={"prompt": [VOCAB], "max_tokens": 8})
        assert resp.status_code == 503, resp.text
        stop = await proxy.wait_stopped()
        assert stop.kind == "infra" and "control request too" in stop.message
        assert await f.received(f.first) == [[VOCAB], [0]]
        assert await f.received(f.second) == []  # one request costs one engine at most
        await proxy.close()


async def test_ctx_llm_a_prompt_the_policy_shaped_that_a_backend_fails_on_is_agent_error(
    tmp_path: Path,
) -> None:
    """The same rule for a handler's session: once the prompt holds the policy's doing (its
    replies, a tool's output), a backend failing on it ends the turn as the policy's error,
    and the other backend is not tried."""
    async with fleet(tmp_path) as f:
        session = f.rig.session(seed=3)
        await session.start([say("one")])
        assert (await session.generate()).text == "one"
        await session.add_messages([say(f"two {ENGINE_FAILURE_MARK}")])  # a tool's output
        with pytest.raises(UnservableRequest, match="served a control request") as caught:
            await session.generate()
        decision = classify_error("run", caught.value)
        assert (decision.outcome, decision.evaluate) == ("agent_error", True)
        # Turn one, the failing turn, the control, the failing turn once more.
        assert len(await f.received(f.first)) == 4
        assert await f.received(f.second) == []


async def test_ctx_llm_the_task_prompt_alone_is_still_retried_on_another_backend(
    tmp_path: Path,
) -> None:
    """The control beside it: the first turn's prompt is the task's, not the policy's, so a
    backend failing on it is the backend's trouble and another backend serves it."""
    async with fleet(tmp_path, fail_rate=1.0) as f:
        session = f.rig.session(seed=3)
        await session.start([say("one")])
        turn = await session.generate()
        assert turn.text == "one" and turn.backend_id == "second"
        assert [r["backend"] for r in session.retries] == ["first"]


async def test_sglang_reports_its_tokenizer_and_an_id_beyond_it_never_reaches_the_engine(
    tmp_path: Path,
) -> None:
    """SGLang's scheduler dies on an id beyond its vocabulary. Its `tokenizer_path` (from
    `/model_info`) is read before the first generation request, even when that request is
    the harness's very first one, so the engine never sees the id."""
    tokenizer = str(export_tokenizer(tmp_path / "tokenizer"))
    config = ScriptedLLMConfig(flavor="sglang", tokenizer_path=tokenizer, out_of_vocab="crash")
    server = await start_in_loop(create_scripted_app(config))
    http_client = HTTPClient()
    try:
        pool = BackendPool(http_client)
        pool.add(BackendSpec(id="sglang", kind="sglang", base_url=server.url))
        f = Fleet(Rig(server, pool, GenerationGate()), server, server)
        proxy = await f.rig.proxy(tmp_path)
        async with client_for(proxy) as http:
            resp = await http.post("/completions", json={"prompt": [VOCAB], "max_tokens": 8})
        assert resp.status_code == 400, resp.text
        assert f"prompt[0] = {VOCAB} is not a token id of this model" in error_text(resp)
        assert await f.received(server) == []
        served = await post(proxy, "completions", "one")
        assert served.status_code == 200, served.text
        assert proxy.stopped is None
        await proxy.close()
    finally:
        await http_client.close()
        await server.stop()


async def test_a_token_prompt_longer_than_the_context_is_refused_before_it_is_sent(
    tmp_path: Path,
) -> None:
    async with fleet(tmp_path) as f:
        proxy = await f.rig.proxy(tmp_path)
        assert (await post(proxy, "chat", "one")).status_code == 200  # learns the context
        before = await f.received(f.first)
        ids = get_tokenizer().encode("word") * 9000  # beyond the scripted model's 8192
        async with client_for(proxy) as http:
            resp = await http.post("/completions", json={"prompt": ids, "max_tokens": 8})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "context_length_exceeded"
        assert await f.received(f.first) == before and await f.received(f.second) == []
        assert proxy.stopped is None
        await proxy.close()


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_the_control_carries_none_of_the_harness_stop_strings(
    tmp_path: Path, api: str
) -> None:
    """A harness's `stop` strings are its own shaping: a backend failing on them must not make
    the control fail too (that would blame a working backend, `infra_error` for the policy's
    doing). The control is the job's sampling alone; the same request without that stop string
    is served on the same backend."""
    failing = "<failing-stop>"
    async with fleet(tmp_path, failing_stop=failing) as f:
        proxy = await f.rig.proxy(tmp_path)
        async with client_for(proxy) as http:
            if api == "chat":
                body: dict[str, Any] = {"messages": [say("one")]}
            else:
                text = f"<|im_start|>user\n{say('one')['content']}<|im_end|>\n"
                body = {"prompt": get_tokenizer().encode(text), "max_tokens": 32}
            failed = await http.post(f"/{api.replace('chat', 'chat/completions')}",
                                     json={**body, "stop": [failing]})  # fmt: skip
            assert failed.status_code == 502, failed.text
            assert "served a control request" in failed.text
            assert proxy.stopped is None  # not infra: the rollout goes on
            assert await f.received(f.second) == []
            # The control beside it: without the stop string the same call is served.
            served = await http.post(
                f"/{api.replace('chat', 'chat/completions')}", json={**body, "stop": ["\n\n"]}
            )
            assert served.status_code == 200, served.text
        assert proxy.stopped is None
        await proxy.close()


async def test_a_control_cut_short_by_a_pause_is_asked_again_after_resume(
    tmp_path: Path,
) -> None:
    """A weight sync that aborts the control in flight decides nothing: the control is sent
    again once generation resumes, and a backend that serves it is not blamed (`infra_error`
    for the policy's doing otherwise). The control beside it, a backend that is really broken,
    is `test_a_backend_that_fails_a_control_too_is_infra_and_the_request_stays_put`."""
    async with fleet(tmp_path, latency_s=10.0) as f:
        proxy = await f.rig.proxy(tmp_path)
        call = asyncio.create_task(post(proxy, "chat", f"poison {ENGINE_FAILURE_MARK}"))
        async with asyncio.timeout(60):
            while len(await f.received(f.first)) < 2:  # the request, then the control
                await asyncio.sleep(0.05)
        gate = f.rig.gate
        gate.close("abort")
        gate.abort_in_flight()
        gate.open(1)
        failed = await call
        assert failed.status_code == 502, failed.text
        assert "served a control request" in failed.text
        first = await f.received(f.first)
        # The control, asked twice, then the request once more (it failed again).
        assert len(first) == 4 and first[1] == first[2] == [0] and first[3] == first[0]
        assert await f.received(f.second) == []
        assert proxy.stopped is None
        await proxy.close()


async def hiccup(server: RunningServer, failures: int = 1) -> None:
    """The next `failures` generation requests `server` gets answer 500, then it serves."""
    async with httpx.AsyncClient(base_url=server.url) as http:
        (await http.post("/scripted/fault", json={"fail_next": failures})).raise_for_status()


async def test_a_backend_hiccup_on_an_honest_request_is_not_the_policy_error(
    tmp_path: Path,
) -> None:
    """A backend that fails once (a hiccup: an engine behind a load balancer restarted, a
    transient 500) and then serves the control has not shown the request is at fault: the
    request is sent once more to that backend, and served, the rollout goes on unblamed. The
    control beside it: a request the backend fails on every time is still the policy's."""
    async with fleet(tmp_path) as f:
        session = f.rig.session(seed=3)
        await session.start([say("one")])
        assert (await session.generate()).text == "one"
        await session.add_messages([say("two")])  # an honest tool output
        await hiccup(f.first)
        turn = await session.generate()
        assert turn.text == "two" and turn.backend_id == "first"
        assert await f.received(f.second) == []  # never carried to another engine
        proxy = await f.rig.proxy(tmp_path)
        await hiccup(f.first)
        served = await post(proxy, "chat", "three")
        assert served.status_code == 200, served.text
        assert proxy.stopped is None and proxy.report()["refused"] == {}
        failed = await post(proxy, "chat", f"poison {ENGINE_FAILURE_MARK}")
        assert failed.status_code == 502 and "served a control request" in failed.text
        await proxy.close()


@pytest.mark.parametrize("api", ["chat", "completions", "anthropic"])
async def test_a_flood_of_stop_strings_never_reaches_an_engine(tmp_path: Path, api: str) -> None:
    """An engine matches every stop string against every token it samples: thousands of them
    would slow every rollout it serves. More than a harness needs are refused (400) before any
    backend sees the call; a handful, as harnesses send, is served."""
    async with fleet(tmp_path) as f:
        proxy = await f.rig.proxy(tmp_path)
        text = f"<|im_start|>user\n{say('one')['content']}<|im_end|>\n"
        path, body, field = {
            "chat": ("/chat/completions", {"messages": [say("one")]}, "stop"),
            "completions": (
                "/completions",
                {"prompt": get_tokenizer().encode(text), "max_tokens": 32},
                "stop",
            ),
            "anthropic": (
                "/messages",
                {"model": "policy", "max_tokens": 64, "messages": [say("one")]},
                "stop_sequences",
            ),
        }[api]
        async with client_for(proxy) as http:
            http.headers["x-api-key"] = proxy.api_key
            flood = [f"<stop-{i}>" for i in range(10_000)]
            for stops, why in ((flood, "stop strings are taken"), (["x" * 5000], "characters")):
                refused = await http.post(path, json={**body, field: stops})
                assert refused.status_code == 400, refused.text
                assert why in error_text(refused)
            assert await f.received(f.first) == [] and await f.received(f.second) == []
            served = await http.post(path, json={**body, field: ["\n\n", "</answer>"]})
            assert served.status_code == 200, served.text
        assert proxy.stopped is None
        await proxy.close()


async def test_a_job_whose_sampling_every_backend_refuses_is_infra_not_the_harness_error(
    tmp_path: Path,
) -> None:
    """A backend that refuses (4xx) what the harness sent blames the harness only if it serves
    a control request: a seed beyond 64 bits is the trainer's doing, refused for the control
    too, so the rollout is `infra_error`, never a harness scored on errors it did not cause.
    The control beside it is `test_a_request_a_backend_fails_on_is_the_harness_error_...`:
    there the backend serves the control."""
    async with fleet(tmp_path) as f:
        proxy = await f.rig.proxy(tmp_path, f.rig.session(seed=2**64))
        resp = await post(proxy, "chat", "one")
        assert resp.status_code == 503, resp.text
        stop = await proxy.wait_stopped()
        assert stop.kind == "infra" and "control request" in stop.message, stop
        assert proxy.report()["refused"] == {}
        await proxy.close()
