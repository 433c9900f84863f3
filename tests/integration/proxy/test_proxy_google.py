"""The recording proxy speaking Google's generateContent on a real Unix socket against a real
scripted backend: keys, streams, function calls in a Gemini CLI-style loop, side calls,
error envelopes."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.proxy.proxy_support import client_for, rig
from tests.integration.proxy.test_proxy_endpoint import assert_chain_exact

from agentroll.server.proxy import RolloutProxy
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step

pytestmark = pytest.mark.integration

GENERATE = "/v1beta/models/policy:generateContent"
STREAM = "/v1beta/models/policy:streamGenerateContent"
SYSTEM = {"parts": [{"text": "You are a careful shell agent."}]}
SHELL = {
    "functionDeclarations": [
        {
            "name": "run_shell_command",
            "description": "Run a bash command.",
            "parametersJsonSchema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        }
    ]
}


def google_client(proxy: RolloutProxy, key: str | None = None) -> httpx.AsyncClient:
    """A client on the proxy's socket sending the key as Google's clients do."""
    headers = {} if key == "" else {"x-goog-api-key": key or proxy.api_key}
    transport = httpx.AsyncHTTPTransport(uds=proxy.socket_path)
    return httpx.AsyncClient(
        transport=transport, base_url="http://rollout", headers=headers, timeout=30
    )


def shell_agent(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """Runs `run_shell_command` twice when it is offered, then answers in text."""
    if "run_shell_command" not in offered_tools(conv):
        return None
    n = step(conv)
    if n < 2:
        return call("run_shell_command", {"command": f"echo {n}"}, f"Step {n}.")
    return Reply("Both commands ran.")


def sse_chunks(text: str) -> list[dict[str, Any]]:
    frames = [f for f in text.split("\r\n\r\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    return [json.loads(f[6:]) for f in frames]


def merged_content(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The model turn as Gemini CLI keeps it: streamed text merged, calls as sent."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    return {"role": "model", "parts": parts}


async def shell_loop(http: httpx.AsyncClient, echo_ids: bool) -> list[str]:
    """Drive the agent to its end as Gemini CLI would (streamed, ids echoed) or as a classic
    client would (plain calls, ids dropped); returns each answer's finish reason."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Run two echos."}]}]
    finishes = []
    for _ in range(3):
        body = {"systemInstruction": SYSTEM, "contents": contents, "tools": [SHELL]}
        if echo_ids:
            resp = await http.post(STREAM, params={"alt": "sse"}, json=body)
            assert resp.headers["content-type"].startswith("text/event-stream")
            chunks = sse_chunks(resp.text)
            content = merged_content(chunks)
        else:
            resp = await http.post(GENERATE, json=body)
            chunks = [resp.json()]
            content = chunks[0]["candidates"][0]["content"]
            for part in content["parts"]:
                part.get("functionCall", {}).pop("id", None)
        assert resp.status_code == 200
        finishes.append(chunks[-1]["candidates"][0]["finishReason"])
        contents.append(content)
        results = []
        for part in content["parts"]:
            if "functionCall" in part:
                fc = part["functionCall"]
                response = {"output": f"ran {fc['args']['command']}"}
                results.append({"functionResponse": {"name": fc["name"], "response": response}})
                if echo_ids:
                    results[-1]["functionResponse"]["id"] = fc["id"]
        if not results:
            break
        contents.append({"role": "user", "parts": results})
    return finishes


@pytest.mark.parametrize("echo_ids", [True, False], ids=["gemini_cli", "classic"])
async def test_a_function_calling_loop_stays_one_exact_chain(
    tmp_path: Path, echo_ids: bool
) -> None:
    rules = default_rules()
    rules.register("shell_agent", shell_agent)
    async with rig(policy="shell_agent", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        async with google_client(proxy) as http:
            finishes = await shell_loop(http, echo_ids)
        log = await r.backend_log()
    assert finishes == ["STOP", "STOP", "STOP"]
    report = proxy.report()
    assert (report["num_chains"], report["prefix_extended"], report["prefix_broken"]) == (1, 2, 0)
    assert [c["api"] for c in report["call_log"]] == ["google"] * 3
    assert [c["stream"] for c in report["call_log"]] == [echo_ids] * 3
    assert [c["finish_reason"] for c in report["call_log"]] == ["tool_calls", "tool_calls", "stop"]
    assert_chain_exact(proxy.book.chains[0], log)
    trajectory = proxy.trajectory()
    assert trajectory is not None
    assert trajectory.tools[0]["function"]["name"] == "run_shell_command"
    messages = trajectory.messages
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert (
        messages[3]["content"] == "ran echo 0" and messages[-1]["content"] == "Both commands ran."
    )
    await proxy.close()


async def test_a_router_call_is_served_and_marked_side(tmp_path: Path) -> None:
    rules = default_rules()
    rules.register("shell_agent", shell_agent)
    async with rig(policy="shell_agent,echo", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        async with google_client(proxy) as http:
            router = {
                "systemInstruction": {"parts": [{"text": "Score the task's complexity."}]},
                "contents": [{"role": "user", "parts": [{"text": "Repeat after me: 42"}]}],
                "generationConfig": {"responseMimeType": "application/json"},
            }
            first = await http.post("/v1beta/models/flash-lite:generateContent", json=router)
            await shell_loop(http, echo_ids=True)
    assert first.status_code == 200
    assert first.json()["candidates"][0]["content"]["parts"] == [{"text": "42"}]
    report = proxy.report()
    assert report["num_chains"] == 2 and report["side_calls"] == 1
    assert [c["side"] for c in report["call_log"]] == [True, False, False, False]
    main = report["chains"][0]
    assert main["main"] and main["calls"] == [1, 2, 3] and main["broken"] is None
    await proxy.close()


async def test_another_rollouts_key_or_none_is_refused_in_googles_envelope(
    tmp_path: Path,
) -> None:
    async with rig() as r:
        mine = await r.proxy(tmp_path, name="a.sock")
        theirs = await r.proxy(tmp_path, name="b.sock")
        body = {"contents": [{"parts": [{"text": "Repeat after me: hello"}]}]}
        for key in (theirs.api_key, "", "AIza-guess"):
            async with google_client(mine, key=key) as http:
                for resp in (
                    await http.post(GENERATE, json=body),
                    await http.post(STREAM, params={"alt": "sse"}, json=body),
                ):
                    assert resp.status_code == 401
                    error = resp.json()["error"]
                    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
        # An OpenAI-style bearer token from another rollout fares no better.
        async with client_for(mine, key=theirs.api_key) as http:
            assert (await http.post(GENERATE.removeprefix("/v1"), json=body)).status_code == 401
        assert mine.report()["calls"] == 0 and await r.backend_log() == []
        async with google_client(mine) as http:
            ok = await http.post(GENERATE, json=body)
        assert ok.status_code == 200
        assert ok.json()["candidates"][0]["content"]["parts"] == [{"text": "hello"}]
        assert mine.report()["refused"] == {"unauthorized": 7}
        await mine.close()
        await theirs.close()


async def test_bad_requests_get_googles_errors_and_the_rollout_goes_on(tmp_path: Path) -> None:
    async with rig(max_model_len=64) as r:
        proxy = await r.proxy(tmp_path)
        image = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
        async with google_client(proxy) as http:
            answers = [
                await http.post(GENERATE, content=b"{not json"),
                await http.post(GENERATE, json={"contents": [{"parts": [image]}]}),
                await http.post(GENERATE, json={"contents": [{"parts": [{"text": "x"}]}],
                                                "tools": [{"googleSearch": {}}]}),
                await http.post(GENERATE, json={"contents": [{"parts": [{"text": "w " * 80}]}]}),
            ]  # fmt: skip
            counted = await http.post("/v1beta/models/policy:countTokens", json={"contents": []})
            ok = await http.post(GENERATE, json={"contents": [{"parts": [{"text": "hi"}]}]})
        errors = [a.json()["error"] for a in answers]
        assert [a.status_code for a in answers] == [400, 400, 400, 400]
        assert {e["status"] for e in errors} == {"INVALID_ARGUMENT"}
        assert "not JSON" in errors[0]["message"]
        assert "images, audio, video and files" in errors[1]["message"]
        assert "server-side tools" in errors[2]["message"]
        assert "maximum context length" in errors[3]["message"]
        assert counted.status_code == 501 and counted.json()["error"]["status"] == "UNIMPLEMENTED"
        assert ok.status_code == 200 and proxy.stopped is None
        assert proxy.report()["calls"] == 2  # the overflow and the good call reached the backend
        await proxy.close()


def lone_surrogate_agent(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """A call whose argument JSON escapes half a surrogate pair: valid JSON, not UTF-8."""
    if "run_shell_command" not in offered_tools(conv):
        return None
    return Reply('<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "\\ud800"}}'
                 "\n</tool_call>")  # fmt: skip


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "sse"])
async def test_a_reply_that_is_not_utf8_encodable_is_still_answered(
    tmp_path: Path, streamed: bool
) -> None:
    rules = default_rules()
    rules.register("lone_surrogate_agent", lone_surrogate_agent)
    async with rig(policy="lone_surrogate_agent", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        body = {"contents": [{"parts": [{"text": "go"}]}], "tools": [SHELL]}
        async with google_client(proxy) as http:
            if streamed:
                resp = await http.post(STREAM, params={"alt": "sse"}, json=body)
                content = merged_content(sse_chunks(resp.text))
            else:
                resp = await http.post(GENERATE, json=body)
                content = resp.json()["candidates"][0]["content"]
        assert resp.status_code == 200
        call = content["parts"][0]["functionCall"]
        assert call["args"] == {"command": "\ud800"}
        # Echoed back (escaped, as JavaScript's JSON.stringify writes it), the conversation is
        # one the backend cannot tokenize: the harness hears so in Google's envelope, and the
        # rollout goes on.
        result = {"functionResponse": {"id": call["id"], "name": call["name"], "response": {}}}
        body["contents"] += [content, {"role": "user", "parts": [result]}]
        echoed = json.dumps(body).encode()
        async with google_client(proxy) as http:
            json_type = {"content-type": "application/json"}
            resp = await http.post(GENERATE, content=echoed, headers=json_type)
        assert resp.status_code == 400
        assert resp.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert proxy.stopped is None and proxy.report()["refused"] == {"unservable": 1}
        await proxy.close()
