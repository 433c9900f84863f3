"""The recording proxy on a real Unix socket against a real scripted backend: OpenAI answers,
streams, secrets, tool calls, token-id completions, caps, context overflow, chain breaks."""

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.proxy.proxy_support import Rig, assert_chain_exact, client_for, rig

from agentroll.handlers import ProxyLimits
from agentroll.server.proxy.recording import chain_traces
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step

pytestmark = pytest.mark.integration

SYSTEM = {"role": "system", "content": "You repeat things."}


def say(text: str) -> dict[str, str]:
    return {"role": "user", "content": f"Repeat after me: {text}"}


def sse_events(text: str) -> list[Any]:
    lines = [ln[6:] for ln in text.split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


async def two_turns(r: Rig, tmp: Path, name: str, stream: bool) -> tuple[Any, list[str]]:
    proxy = await r.proxy(tmp, r.session(seed=11), name=name)
    texts = []
    async with client_for(proxy) as http:
        history: list[dict[str, Any]] = [SYSTEM, say("the quick brown fox")]
        for follow_up in ("jumps over the lazy dog", ""):
            body = {"model": "policy", "messages": history, "stream": stream}
            resp = await http.post("/chat/completions", json=body)
            assert resp.status_code == 200
            if stream:
                assert resp.headers["content-type"].startswith("text/event-stream")
                events = sse_events(resp.text)
                assert events[0]["choices"][0]["delta"]["role"] == "assistant"
                assert events[-1]["choices"][0]["finish_reason"] == "stop"
                text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
            else:
                text = resp.json()["choices"][0]["message"]["content"]
            texts.append(text)
            history = [*history, {"role": "assistant", "content": text}, say(follow_up)]
            if not follow_up:
                break
    await proxy.close()
    return proxy, texts


async def test_streaming_and_plain_calls_record_the_same_tokens(tmp_path: Path) -> None:
    async with rig() as r:
        plain, plain_texts = await two_turns(r, tmp_path, "plain.sock", stream=False)
        streamed, streamed_texts = await two_turns(r, tmp_path, "stream.sock", stream=True)
        log = await r.backend_log()
    assert plain_texts == streamed_texts == ["the quick brown fox", "jumps over the lazy dog"]
    a, b = plain.trajectory(), streamed.trajectory()
    assert a.prompt_ids == b.prompt_ids
    assert (a.response_ids, a.response_mask) == (b.response_ids, b.response_mask)
    assert a.response_logprobs == b.response_logprobs
    assert [s.model_dump() for s in a.segments] == [s.model_dump() for s in b.segments]
    assert len(log) == 4 and a.num_turns == 2
    assert_chain_exact(plain.book.chains[0], log)
    assert [c["stream"] for c in streamed.report()["call_log"]] == [True, True]


async def test_a_request_with_another_rollouts_secret_is_refused(tmp_path: Path) -> None:
    async with rig() as r:
        mine = await r.proxy(tmp_path, name="a.sock")
        theirs = await r.proxy(tmp_path, name="b.sock")
        assert mine.api_key != theirs.api_key
        body = {"model": "policy", "messages": [SYSTEM, say("hello")]}
        for key in (theirs.api_key, "", "sk-guess"):
            async with client_for(mine, key=key) as http:
                for resp in (
                    await http.post("/chat/completions", json=body),
                    await http.get("/models"),
                ):
                    assert resp.status_code == 401
                    assert resp.json()["error"]["code"] == "invalid_api_key"
        assert mine.report()["calls"] == 0 and await r.backend_log() == []
        async with client_for(mine) as http:
            assert (await http.post("/chat/completions", json=body)).status_code == 200
            models = (await http.get("/models")).json()
        assert models["data"][0]["id"] == "policy"
        assert mine.report()["refused"] == {"unauthorized": 6}
        await mine.close()
        await theirs.close()


def bash_agent(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """Calls `bash` twice when a bash tool is offered, then answers in text."""
    if "bash" not in offered_tools(conv):
        return None
    n = step(conv)
    return call("bash", {"command": f"echo {n}"}, "Running it.") if n < 2 else Reply("Done.")


async def test_tool_calls_are_returned_in_openai_form_and_the_chain_continues(
    tmp_path: Path,
) -> None:
    rules = default_rules()
    rules.register("bash_agent", bash_agent)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        }
    ]
    async with rig(policy="bash_agent", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Run echo."}]
        finishes = []
        async with client_for(proxy) as http:
            for turn in range(3):
                body = {"model": "policy", "messages": history, "tools": tools}
                body["stream"] = turn == 1
                resp = await http.post("/chat/completions", json=body)
                if turn == 1:
                    events = sse_events(resp.text)
                    calls = [
                        tc for e in events for tc in e["choices"][0]["delta"].get("tool_calls", [])
                    ]
                    finishes.append(events[-1]["choices"][0]["finish_reason"])
                    message = {
                        "role": "assistant",
                        "content": "Running it.",
                        "tool_calls": [{k: v for k, v in c.items() if k != "index"} for c in calls],
                    }
                else:
                    choice = resp.json()["choices"][0]
                    finishes.append(choice["finish_reason"])
                    message = choice["message"]
                history.append(message)
                for tc in message.get("tool_calls") or []:
                    assert tc["type"] == "function" and tc["function"]["name"] == "bash"
                    args = json.loads(tc["function"]["arguments"])
                    out = {"role": "tool", "tool_call_id": tc["id"], "content": args["command"]}
                    history.append(out)
        log = await r.backend_log()
    assert finishes == ["tool_calls", "tool_calls", "stop"]
    assert history[2]["tool_calls"][0]["id"] == "call_0_0"
    assert history[2]["content"] == "Running it."
    report = proxy.report()
    assert (report["num_chains"], report["prefix_extended"], report["prefix_broken"]) == (1, 2, 0)
    assert_chain_exact(proxy.book.chains[0], log)
    assert proxy.trajectory().tools == tools
    await proxy.close()


async def test_history_rewrite_starts_a_second_exact_chain_and_reports_why(
    tmp_path: Path,
) -> None:
    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:

            async def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
                resp = await http.post("/chat/completions", json={"messages": messages})
                assert resp.status_code == 200
                return dict(resp.json()["choices"][0]["message"])

            h = [SYSTEM, say("one")]
            h += [await chat(h), say("two")]
            h.append(await chat(h))
            # The harness summarises its history: a new chain starts here.
            h = [SYSTEM, say("what came before was one and two, now three")]
            h += [await chat(h), say("four")]
            h.append(await chat(h))
        log = await r.backend_log()
    report = proxy.report()
    assert report["num_chains"] == 2
    assert (report["prefix_extended"], report["prefix_broken"]) == (2, 1)
    first, second = proxy.book.chains
    assert first.calls == [0, 1] and second.calls == [2, 3]
    assert first.broken is not None and first.broken.by_call == 2
    assert first.broken.reason == "history_rewritten"
    assert first.broken.at_token is not None and first.broken.at_token < len(first.prompt_ids)
    assert second.broken is None
    for chain in (first, second):
        assert_chain_exact(chain, log)
    # The main chain (most sampled tokens) comes first in the report; the other is a sample
    # of its own, the loop before or after the rewrite.
    main = proxy.book.main()
    assert report["chains"][0]["main"] and report["chains"][0]["index"] == report["main_chain"]
    (other,) = chain_traces(proxy, {})
    assert other.kind == "continuation" and report["chains"][1]["kind"] == "continuation"
    assert other.response_ids == (second if main is first else first).response_ids
    assert proxy.trajectory().response_ids == main.response_ids
    await proxy.close()


async def test_token_id_completions_extend_a_chain_literally(tmp_path: Path) -> None:
    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            chat = await http.post("/chat/completions", json={"messages": [SYSTEM, say("hi")]})
            assert chat.status_code == 200
            chain = proxy.book.chains[0]
            prompt = [*chain.tokens, 198]  # everything so far, then one more token
            resp = await http.post("/completions", json={"prompt": prompt, "max_tokens": 8})
            assert resp.status_code == 200 and resp.json()["object"] == "text_completion"
            text_prompt = await http.post("/completions", json={"prompt": "hello"})
        log = await r.backend_log()
    assert text_prompt.status_code == 400
    assert "token ids" in text_prompt.json()["error"]["message"]
    assert proxy.report()["num_chains"] == 1 and chain.calls == [0, 1]
    assert log[1]["prompt_token_ids"] == prompt
    assert chain.response_mask[len(log[0]["token_ids"])] == 0  # the extra token is not sampled
    assert_chain_exact(chain, log)
    await proxy.close()


async def test_call_cap_refuses_the_next_call_and_stops_the_proxy(tmp_path: Path) -> None:
    async with rig() as r:
        proxy = await r.proxy(tmp_path, limits=ProxyLimits(max_calls=2))
        body = {"messages": [SYSTEM, say("again")]}
        async with client_for(proxy) as http:
            codes = [
                (await http.post("/chat/completions", json=body)).status_code for _ in range(4)
            ]
            refusal = (await http.post("/chat/completions", json=body)).json()
        assert codes == [200, 200, 403, 403]
        assert refusal["error"]["type"] == "rollout_limit_exceeded"
        stop = await proxy.wait_stopped()
        assert (stop.kind, stop.cause) == ("limit", "max_calls")
        assert len(await r.backend_log()) == 2
        await proxy.close()


async def test_context_overflow_is_a_400_the_harness_can_recover_from(tmp_path: Path) -> None:
    async with rig(max_model_len=64) as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            long = [SYSTEM, say("word " * 80)]
            resp = await http.post("/chat/completions", json={"messages": long})
            ok = await http.post("/chat/completions", json={"messages": [say("hi")]})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "context_length_exceeded"
        assert ok.status_code == 200 and proxy.stopped is None
        report = proxy.report()
        assert report["context_overflows"] == 1 and report["num_chains"] == 1
        await proxy.close()


async def test_a_backend_that_fails_stops_the_proxy_as_infra(tmp_path: Path) -> None:
    async with rig(fail_rate=1.0) as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            resp = await http.post("/chat/completions", json={"messages": [say("hi")]})
        assert resp.status_code == 503
        stop = await proxy.wait_stopped()
        assert stop.kind == "infra" and stop.cause == "llm_backend_unavailable"
        assert proxy.report()["num_chains"] == 0 and proxy.trajectory() is None
        await proxy.close()
