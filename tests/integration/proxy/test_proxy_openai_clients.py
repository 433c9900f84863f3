"""OpenCode's and Qwen Code's requests through a real rollout proxy (Unix socket, scripted
backend): keys, refusals in OpenAI's envelope, and a conversation sent back the way these
clients send it (arguments re-serialised, results as text parts) staying one exact chain."""

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.proxy.proxy_support import client_for, rig
from tests.integration.proxy.test_proxy_endpoint import assert_chain_exact, sse_events

from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, default_rules
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, step

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openai_chat"
SHELL = {
    "type": "function",
    "function": {
        "name": "run_shell_command",
        "description": "Run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def captured(name: str, request: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text())[request]["body"])


async def test_another_rollouts_key_or_none_is_refused_in_openais_envelope(
    tmp_path: Path,
) -> None:
    body = captured("opencode_1.18.33.json", "title")
    async with rig() as r:
        mine = await r.proxy(tmp_path, name="a.sock")
        theirs = await r.proxy(tmp_path, name="b.sock")
        for key in (theirs.api_key, ""):
            async with client_for(mine, key=key) as http:
                resp = await http.post("/chat/completions", json=body)
            assert resp.status_code == 401
            assert resp.json() == {
                "error": {
                    "message": "invalid API key for this rollout",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        assert mine.report()["calls"] == 0 and await r.backend_log() == []
        async with client_for(mine) as http:  # its own key: served, streamed as asked
            resp = await http.post("/chat/completions", json=body)
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert sse_events(resp.text)[-1]["usage"]["completion_tokens"] > 0
        assert mine.report()["refused"] == {"unauthorized": 2}
        await mine.close()
        await theirs.close()


async def test_what_the_policy_cannot_read_is_refused_before_anything_is_sampled(
    tmp_path: Path,
) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    body = captured("qwen_code_0.24.4.json", "main_turn_4")
    body["messages"][1]["content"].append(image)
    async with rig() as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            resp = await http.post("/chat/completions", json=body)
            bad = await http.post("/chat/completions", content=b'{"messages": [')
        assert resp.status_code == 400
        assert resp.json()["error"] == {
            "message": "Invalid content type. image_url is only supported by certain models.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
        assert bad.status_code == 400
        assert bad.json()["error"]["message"].startswith("the body is not JSON")
        assert proxy.report()["calls"] == 0 and await r.backend_log() == []
        await proxy.close()


def shell_agent(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """Runs two commands when `run_shell_command` is offered, then answers in text."""
    if "run_shell_command" not in offered_tools(conv):
        return None
    n = step(conv)
    if n < 2:
        return call("run_shell_command", {"command": f"echo {n}", "description": "Échos"}, "Ok.")
    return Reply("Done.")


async def test_a_conversation_sent_back_as_these_clients_do_stays_one_exact_chain(
    tmp_path: Path,
) -> None:
    rules = default_rules()
    rules.register("shell_agent", shell_agent)
    task = [{"type": "text", "text": "<system-reminder>cwd: /repo</system-reminder>"}]
    task.append({"type": "text", "text": "Run two commands.", "cache_control": {"x": 1}})
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": task},
    ]
    async with rig(policy="shell_agent", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            for _ in range(3):
                body = {
                    "model": "policy",
                    "messages": history,
                    "tools": [SHELL],
                    "tool_choice": "auto",
                    "parallel_tool_calls": False,
                    "max_tokens": 32000,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                resp = await http.post("/chat/completions", json=body)
                assert resp.status_code == 200, resp.text
                deltas = [e["choices"][0]["delta"] for e in sse_events(resp.text) if e["choices"]]
                calls = [c for d in deltas for c in d.get("tool_calls", [])]
                content = "".join(d.get("content") or "" for d in deltas)
                turn: dict[str, Any] = {"role": "assistant", "content": content}
                if calls:
                    # As the clients store a call: arguments parsed, then JSON.stringify'd.
                    turn["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {
                                "name": c["function"]["name"],
                                "arguments": json.dumps(
                                    json.loads(c["function"]["arguments"]),
                                    separators=(",", ":"),
                                    ensure_ascii=False,
                                ),
                            },
                        }
                        for c in calls
                    ]
                history.append(turn)
                for c in calls:
                    command = json.loads(c["function"]["arguments"])["command"]
                    output = [{"type": "text", "text": f"Output: {command[5:]}\nExit Code: 0"}]
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": output})
        log = await r.backend_log()
    assert [m["role"] for m in history[2:]] == ["assistant", "tool"] * 2 + ["assistant"]
    assert history[-1]["content"] == "Done."
    assert history[2]["tool_calls"][0]["function"]["arguments"] == (
        '{"command":"echo 0","description":"Échos"}'
    )
    report = proxy.report()
    assert (report["num_chains"], report["prefix_extended"], report["prefix_broken"]) == (1, 2, 0)
    assert_chain_exact(proxy.book.chains[0], log)
    await proxy.close()


def lone_surrogate(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """A call whose arguments carry `\\ud800`: valid JSON text, but a code unit no UTF-8
    encodes once parsed."""
    command = '{"command": "echo \\ud800"}'
    return Reply(
        f'<tool_call>\n{{"name": "run_shell_command", "arguments": {command}}}\n</tool_call>'
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_no_utf8_can_encode_gets_whole_answers_and_nothing_stops(
    tmp_path: Path, stream: bool
) -> None:
    rules = default_rules()
    rules.register("lone_surrogate", lone_surrogate)
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": [SHELL], "stream": stream}
    async with rig(policy="lone_surrogate", rules=rules) as r:
        proxy = await r.proxy(tmp_path)
        async with client_for(proxy) as http:
            resp = await http.post("/chat/completions", json=body)
            assert resp.status_code == 200
            if stream:
                calls = [
                    c
                    for e in sse_events(resp.text)
                    for c in (
                        e["choices"][0]["delta"].get("tool_calls", []) if e["choices"] else []
                    )
                ]
            else:
                calls = resp.json()["choices"][0]["message"]["tool_calls"]
            # The JSON escape for the code unit, as json.dumps(ensure_ascii=True) writes it.
            assert json.loads(calls[0]["function"]["arguments"]) == {"command": "echo \ud800"}
            # The harness echoes it back; the backend cannot tokenize that code unit either:
            # the harness is told so in OpenAI's envelope, and the proxy goes on.
            echoed = {k: v for k, v in calls[0].items() if k != "index"}
            history = [
                body["messages"][0],
                {"role": "assistant", "content": None, "tool_calls": [echoed]},
                {"role": "tool", "tool_call_id": echoed["id"], "content": "?"},
            ]
            # As JSON.stringify writes it: the lone code unit escaped.
            echo = json.dumps({**body, "messages": history}).encode()
            again = await http.post("/chat/completions", content=echo)
            assert again.status_code == 400
            assert again.json()["error"]["type"] == "invalid_request_error"
            assert (await http.post("/chat/completions", json=body)).status_code == 200
        report = proxy.report()
        assert report["stopped"] is None and report["refused"] == {"unservable": 1}
        await proxy.close()
